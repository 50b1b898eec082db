// C ABI of the tch-scope shim. No C++ exception crosses it: calls that can
// fail return a status (0 = ok) and leave a message for
// tch_scope_last_error(); the hot-path calls below only move bits in memory
// and cannot fail.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t tch_scope_status;  // 0 = ok, 1 = error (see last_error)

// Message of the last failed call on this thread ("" if none).
const char* tch_scope_last_error(void);

// ---- thread-local autograd state (grad.cpp) ----------------------------
// Pointers to this thread's c10::AutogradState and local dispatch-key set.
// They stay valid for the thread's life, so Rust caches them per thread and
// every later call skips libc10's TLS lookups.
tch_scope_status tch_scope_tls_pointers(void** autograd_state, void** dispatch_keys);

// Grad mode through a cached AutogradState pointer: returns the old value.
bool tch_scope_grad_exchange(void* autograd_state, bool enabled);
bool tch_scope_grad_get(void* autograd_state);

// c10::InferenceMode, done in place on the cached pointers: `saved` receives
// what exit needs (the autograd flags and the previous dispatch-key set).
typedef struct {
  uint64_t included;
  uint64_t excluded;
  uint8_t autograd_flags;
} tch_scope_inference_saved;
void tch_scope_inference_enter(void* autograd_state, void* dispatch_keys, bool enabled,
                               tch_scope_inference_saved* saved);
void tch_scope_inference_exit(void* autograd_state, void* dispatch_keys,
                              const tch_scope_inference_saved* saved);
bool tch_scope_inference_get(void* autograd_state);

// ---- devices (device.cpp), through ATen's accelerator API ---------------
// Number of CUDA devices (0 when libtorch has no CUDA or no GPU is present).
tch_scope_status tch_scope_cuda_device_count(int32_t* count);
// Makes `index` the thread's current CUDA device; `previous` gets the old one.
tch_scope_status tch_scope_cuda_exchange_device(int32_t index, int32_t* previous);
tch_scope_status tch_scope_cuda_current_device(int32_t* index);

// ---- TorchScript module modes (module.cpp) -----------------------------
// `module` is a torch::jit::Module* (tch's CModule pointer, torch-sys's
// `module` typedef). The modes are one flag per module, in modules() order:
// the module itself, then its submodules depth-first. A `saved` handle
// holds each module (a strong reference) with its flag.
// Saves every module's own flag into `*saved`; changes nothing.
tch_scope_status tch_scope_module_save(void* module, void** saved);
// Saves like tch_scope_module_save, then sets every module to `on`, walking
// the modules once. On failure nothing changed and `*saved` is untouched.
tch_scope_status tch_scope_module_enter(void* module, bool on, void** saved);
// Module::train(on): the module and every submodule.
tch_scope_status tch_scope_module_set_training(void* module, bool on);
// Puts each saved flag back on its own module. Does not free `saved`.
tch_scope_status tch_scope_module_leave(const void* saved);
// Copies min(n, cap) saved flags (1 = training) to `out`; returns n.
size_t tch_scope_module_saved_modes(const void* saved, uint8_t* out, size_t cap);
// Frees a handle (once).
void tch_scope_module_saved_free(void* saved);

// 1 when this build of the shim linked libtorch_cuda (see cuda_link.cpp).
int32_t tch_scope_built_with_cuda(void);

// Test-only fault injection: the next `times` calls on this thread of the
// status-returning shim function named `op` (e.g. "tch_scope_rng_restore")
// fail with "injected fault in <op>" without doing anything; `op` = "*"
// matches every such function; `times` = 0 disarms. Reached from Rust only through tch_scope::__private.
void tch_scope_fault_inject(const char* op, int32_t times);

#ifdef __cplusplus
}
#endif

// CUDA memory statistics and synchronisation (memory.cpp).
#include "memory.h"

// RNG, autocast, profiler, anomaly and determinism scopes (context.h).
#include "context.h"

// Precision and kernel choice: matmul precision, cuDNN, SDPA (backends.h).
#include "backends.h"

// CUDA streams and events (stream.h).
#include "stream.h"

// c10d process groups for the `distributed` scope (distributed.cpp).
#include "distributed.h"
