// C ABI of grad mode and inference mode on libtorch's thread-local state
// (grad.cpp). Included by shim.h.
#pragma once
#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

// Pointers to this thread's c10::AutogradState and local dispatch-key set.
// They stay valid for the thread's life, so Rust caches them per thread and
// every later call skips libc10's TLS lookups.
tch_scope_status tch_scope_tls_pointers(void** autograd_state, void** dispatch_keys);

// Grad mode through a cached AutogradState pointer: returns the old value.
bool tch_scope_grad_exchange(void* autograd_state, bool enabled);
bool tch_scope_grad_get(void* autograd_state);

// c10::InferenceMode, done in place on the cached pointers: `saved` receives
// what exit needs (the autograd flags and the previous dispatch-key set).
// Mirrored by `InferenceSaved` in scopes/grad.rs; both sides check the layout.
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

#ifdef __cplusplus
}  // extern "C"
static_assert(sizeof(tch_scope_inference_saved) == 24 && alignof(tch_scope_inference_saved) == 8);
static_assert(offsetof(tch_scope_inference_saved, included) == 0 &&
              offsetof(tch_scope_inference_saved, excluded) == 8 &&
              offsetof(tch_scope_inference_saved, autograd_flags) == 16);
#endif
