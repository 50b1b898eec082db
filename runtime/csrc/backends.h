// Precision and kernel choice (backends.cpp): process-wide flags of
// libtorch's global context, saved and put back by the Rust guards.
#pragma once
#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

// Float32 matmul precision: `out`/`saved` hold 3 values (the legacy
// setting 0 highest / 1 high / 2 medium, then the CUDA and MKLDNN matmul
// entries of the new per-backend API). Save fails where the two APIs were
// mixed (libtorch's own check).
tch_scope_status tch_scope_matmul_save(int32_t* out);
tch_scope_status tch_scope_matmul_restore(const int32_t* saved);
tch_scope_status tch_scope_matmul_set_precision(const char* name);
tch_scope_status tch_scope_matmul_set_tf32(bool allow);
// Readers that cannot fail: where libtorch refuses (mixed APIs) they read
// the CUDA matmul entry.
int32_t tch_scope_matmul_precision_get(void);
bool tch_scope_matmul_allow_tf32_get(void);

// cuDNN flags, 4 each: enabled, benchmark, deterministic, allow_tf32.
// `set[i]` says whether flag `i` is written.
void tch_scope_cudnn_get(bool* out);
tch_scope_status tch_scope_cudnn_set(const bool* set, const bool* value);
// Flag `which` (0..3) alone: its value into `*was` (0 or 1), then `value`.
tch_scope_status tch_scope_cudnn_swap(int32_t which, bool value, uint32_t* was);

// Scaled-dot-product-attention backends as bits: 1 math, 2 flash,
// 4 mem_efficient, 8 cudnn, 16 overrideable.
uint32_t tch_scope_sdpa_get(void);
void tch_scope_sdpa_set(uint32_t bits);

#ifdef __cplusplus
}
#endif
