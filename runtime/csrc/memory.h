// C ABI of the shim's CUDA memory and synchronisation calls (memory.cpp).
// Included by shim.h; every call returns a status (0 = ok).
#pragma once
#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

// The caching allocator's aggregate byte counters of one device.
typedef struct {
  int64_t allocated;       // bytes in tensors now
  int64_t allocated_peak;  // highest `allocated` since the last peak reset
  int64_t reserved;        // bytes the allocator holds from the driver
  int64_t reserved_peak;
} tch_scope_memory_stats;

tch_scope_status tch_scope_cuda_memory_stats(int32_t device, tch_scope_memory_stats* out);
tch_scope_status tch_scope_cuda_reset_peak(int32_t device);
// Frees unused cached blocks of every device (torch.cuda.empty_cache()).
tch_scope_status tch_scope_cuda_empty_cache(void);
// Waits for all work queued on `device` (torch.cuda.synchronize(device)).
tch_scope_status tch_scope_cuda_synchronize(int32_t device);

#ifdef __cplusplus
}  // extern "C"
// Mirrored by `Stats` in runtime/src/cuda.rs, which checks the same.
static_assert(sizeof(tch_scope_memory_stats) == 32 && alignof(tch_scope_memory_stats) == 8);
static_assert(offsetof(tch_scope_memory_stats, allocated) == 0 &&
              offsetof(tch_scope_memory_stats, allocated_peak) == 8 &&
              offsetof(tch_scope_memory_stats, reserved) == 16 &&
              offsetof(tch_scope_memory_stats, reserved_peak) == 24);
#endif
