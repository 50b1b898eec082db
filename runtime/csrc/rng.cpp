// fork_rng / seed: save, seed and restore the default generators. tch has
// no access to generator state, so this goes through ATen directly. CUDA
// generators are reached through at::globalContext() (the CUDA hooks), so
// no CUDA header is needed, and only when CUDA is the accelerator.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <vector>

#include "common.h"
#include "context.h"

namespace {

struct RngState {
  at::Tensor cpu;
  std::vector<at::Tensor> cuda;  // index = device
};

int cuda_devices() {
  auto acc = at::getAccelerator(false);
  if (!acc.has_value() || *acc != c10::DeviceType::CUDA) return 0;
  return static_cast<int>(at::accelerator::deviceCount());
}

at::Generator cuda_generator(int i) {
  return at::globalContext().defaultGenerator(
      c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(i)));
}

// Generators are shared by every thread: use them under their own mutex,
// as PyTorch's Python bindings do.
at::Tensor get_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

void seed(at::Generator gen, uint64_t s) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(s);
}

}  // namespace

extern "C" {

int32_t tch_scope_rng_save(void** state) {
  return tch_scope::guarded([&] {
    auto s = std::make_unique<RngState>();
    s->cpu = get_state(at::detail::getDefaultCPUGenerator());
    for (int i = 0, n = cuda_devices(); i < n; ++i) s->cuda.push_back(get_state(cuda_generator(i)));
    *state = s.release();
  });
}

int32_t tch_scope_rng_restore(const void* state) {
  return tch_scope::guarded([&] {
    auto* s = static_cast<const RngState*>(state);
    set_state(at::detail::getDefaultCPUGenerator(), s->cpu);
    for (size_t i = 0; i < s->cuda.size(); ++i) set_state(cuda_generator(static_cast<int>(i)), s->cuda[i]);
  });
}

void tch_scope_rng_free(void* state) { delete static_cast<RngState*>(state); }

int32_t tch_scope_rng_seed(uint64_t s) {
  return tch_scope::guarded([&] {
    seed(at::detail::getDefaultCPUGenerator(), s);
    for (int i = 0, n = cuda_devices(); i < n; ++i) seed(cuda_generator(i), s);
  });
}

}  // extern "C"
