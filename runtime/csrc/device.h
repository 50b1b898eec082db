// C ABI of the current CUDA device (device.cpp), through ATen's
// accelerator API. Included by shim.h.
#pragma once
#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

// Number of CUDA devices (0 when libtorch has no CUDA or no GPU is present).
tch_scope_status tch_scope_cuda_device_count(int32_t* count);
// Makes `index` the thread's current CUDA device; `previous` gets the old one.
tch_scope_status tch_scope_cuda_exchange_device(int32_t index, int32_t* previous);
tch_scope_status tch_scope_cuda_current_device(int32_t* index);

#ifdef __cplusplus
}  // extern "C"
#endif
