// Precision and kernel choice: float32 matmul precision (TF32), cuDNN's
// flags and the scaled-dot-product-attention backends. Process-wide flags
// of libtorch's global context (every thread sees them).
#include <ATen/Context.h>

#include "backends.h"

using at::Float32Backend;
using at::Float32MatmulPrecision;
using at::Float32Op;
using at::Float32Precision;

namespace {

// The matmul state both `set_float32_matmul_precision` and `allow_tf32`
// write: the legacy setting and the two per-backend matmul entries it
// overwrites (restoring the legacy one alone turns "none" into "ieee").
struct MatmulState {
  int32_t legacy;
  int32_t cuda;
  int32_t mkldnn;
};

}  // namespace

extern "C" {

// 0 highest, 1 high, 2 medium. Throws (status 1) where the legacy and the
// new precision API were mixed, as `torch.get_float32_matmul_precision`.
tch_scope_status tch_scope_matmul_save(int32_t* out) {
  return tch_scope::guarded([&] {
    auto& ctx = at::globalContext();
    out[0] = static_cast<int32_t>(ctx.float32MatmulPrecision());
    out[1] = static_cast<int32_t>(ctx.float32Precision(Float32Backend::CUDA, Float32Op::MATMUL));
    out[2] = static_cast<int32_t>(ctx.float32Precision(Float32Backend::MKLDNN, Float32Op::MATMUL));
  });
}

tch_scope_status tch_scope_matmul_restore(const int32_t* saved) {
  return tch_scope::guarded([&] {
    auto& ctx = at::globalContext();
    static const char* names[] = {"highest", "high", "medium"};
    auto legacy = saved[0];
    TORCH_CHECK(legacy >= 0 && legacy <= 2, "bad matmul precision ", legacy);
    ctx.setFloat32MatmulPrecision(names[legacy]);
    ctx.setFloat32Precision(Float32Backend::MKLDNN, Float32Op::MATMUL,
                            static_cast<Float32Precision>(saved[2]));
    ctx.setFloat32Precision(Float32Backend::CUDA, Float32Op::MATMUL,
                            static_cast<Float32Precision>(saved[1]));
  });
}

tch_scope_status tch_scope_matmul_set_precision(const char* name) {
  return tch_scope::guarded([&] { at::globalContext().setFloat32MatmulPrecision(name); });
}

tch_scope_status tch_scope_matmul_set_tf32(bool allow) {
  return tch_scope::guarded([&] { at::globalContext().setAllowTF32CuBLAS(allow); });
}

// What `torch.get_float32_matmul_precision()` says (0 highest, 1 high,
// 2 medium); where the two APIs were mixed and libtorch refuses to say,
// what the CUDA matmul entry means (tf32: high).
int32_t tch_scope_matmul_precision_get() {
  auto& ctx = at::globalContext();
  try {
    return static_cast<int32_t>(ctx.float32MatmulPrecision());
  } catch (...) {
  }
  try {
    return ctx.float32Precision(Float32Backend::CUDA, Float32Op::MATMUL) == Float32Precision::TF32;
  } catch (...) {
    return 0;
  }
}

bool tch_scope_matmul_allow_tf32_get() {
  auto& ctx = at::globalContext();
  try {
    return ctx.allowTF32CuBLAS();
  } catch (...) {
  }
  try {
    return ctx.float32Precision(Float32Backend::CUDA, Float32Op::MATMUL) == Float32Precision::TF32;
  } catch (...) {
    return false;
  }
}

// enabled, benchmark, deterministic, allow_tf32 (read as the CUDA conv
// entry where libtorch refuses to say, as for matmuls).
void tch_scope_cudnn_get(bool* out) {
  auto& ctx = at::globalContext();
  out[0] = ctx.userEnabledCuDNN();
  out[1] = ctx.benchmarkCuDNN();
  out[2] = ctx.deterministicCuDNN();
  try {
    out[3] = ctx.allowTF32CuDNN();
  } catch (...) {
    try {
      out[3] = ctx.float32Precision(Float32Backend::CUDA, Float32Op::CONV) == Float32Precision::TF32;
    } catch (...) {
      out[3] = false;
    }
  }
}

// `set[i]` says whether flag `i` of `value` is written.
tch_scope_status tch_scope_cudnn_set(const bool* set, const bool* value) {
  return tch_scope::guarded([&] {
    auto& ctx = at::globalContext();
    if (set[0]) ctx.setUserEnabledCuDNN(value[0]);
    if (set[1]) ctx.setBenchmarkCuDNN(value[1]);
    if (set[2]) ctx.setDeterministicCuDNN(value[2]);
    if (set[3]) ctx.setAllowTF32CuDNN(value[3]);
  });
}

// Flag `which` alone: read into `*was`, then set to `value` (a first
// scope's one call; reading all four would read allow_tf32, the dear one).
// Faults are injected under the setter's name, which is what fails.
tch_scope_status tch_scope_cudnn_swap(int32_t which, bool value, uint32_t* was) {
  auto& ctx = at::globalContext();
  switch (which) {
    case 0: *was = ctx.userEnabledCuDNN(); break;
    case 1: *was = ctx.benchmarkCuDNN(); break;
    case 2: *was = ctx.deterministicCuDNN(); break;
    default: {
      bool all[4];
      tch_scope_cudnn_get(all);
      *was = all[3];
    }
  }
  return tch_scope::guarded(
      [&] {
        switch (which) {
          case 0: ctx.setUserEnabledCuDNN(value); break;
          case 1: ctx.setBenchmarkCuDNN(value); break;
          case 2: ctx.setDeterministicCuDNN(value); break;
          default: ctx.setAllowTF32CuDNN(value);
        }
      },
      "tch_scope_cudnn_set");
}

// Bits: 1 math, 2 flash, 4 mem_efficient, 8 cudnn, 16 overrideable.
uint32_t tch_scope_sdpa_get() {
  auto& ctx = at::globalContext();
  return (ctx.userEnabledMathSDP() ? 1u : 0u) | (ctx.userEnabledFlashSDP() ? 2u : 0u) |
         (ctx.userEnabledMemEfficientSDP() ? 4u : 0u) | (ctx.userEnabledCuDNNSDP() ? 8u : 0u) |
         (ctx.userEnabledOverrideableSDP() ? 16u : 0u);
}

void tch_scope_sdpa_set(uint32_t bits) {
  auto& ctx = at::globalContext();
  ctx.setSDPUseMath(bits & 1u);
  ctx.setSDPUseFlash(bits & 2u);
  ctx.setSDPUseMemEfficient(bits & 4u);
  ctx.setSDPUseCuDNN(bits & 8u);
  ctx.setSDPUseOverrideable(bits & 16u);
}

}  // extern "C"
