// C ABI of the tch-scope shim: the umbrella over one header per area.
// common.h has the contract every area shares (the status type, the last
// error's message, fault injection); each area's header declares its calls.
#pragma once

#include "common.h"

// Grad mode and inference mode on cached thread-state pointers (grad.cpp).
#include "grad.h"

// The current CUDA device (device.cpp).
#include "device.h"

// TorchScript module modes (module.cpp).
#include "module.h"

// CUDA memory statistics and synchronisation (memory.cpp).
#include "memory.h"

// Tensor memory allocated and freed on this thread (tensor_memory.cpp).
#include "tensor_memory.h"

// RNG, autocast, profiler, anomaly, determinism, deadline and carried
// context scopes (context.h).
#include "context.h"

// Precision and kernel choice: matmul precision, cuDNN, SDPA (backends.cpp).
#include "backends.h"

// CUDA streams and events (stream.cpp).
#include "stream.h"

// Custom autograd functions written in Rust (autograd.cpp).
#include "autograd.h"

// c10d process groups for the `distributed` scope (distributed.cpp).
#include "distributed.h"

// AOTInductor packages (aoti.cpp).
#include "aoti.h"
