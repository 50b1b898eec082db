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
#include <optional>
#include <vector>

#include "common.h"
#include "context.h"

namespace {

// The CPU generator's whole state, copied as it is: what get_state() would
// serialise into a 5 KB byte tensor and set_state() parse back (the mt19937
// engine, seed included, and the two cached normal samples), without the
// tensor. A get_state/set_state round trip restores exactly these three
// members (CPUGeneratorImpl.cpp); copying them is the same, ~5x cheaper.
struct CpuState {
  // Optional only to skip mt19937's default constructor (it seeds all 624
  // words, which would cost more than the copy): set by get_cpu_state.
  std::optional<at::mt19937> engine;
  std::optional<float> next_float_normal;
  std::optional<double> next_double_normal;
};

struct RngState {
  CpuState cpu;
  std::vector<std::pair<int, at::Tensor>> cuda;  // (device, state)
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

at::CPUGeneratorImpl* cpu_generator() {
  const at::Generator& gen = at::detail::getDefaultCPUGenerator();
  TORCH_CHECK(gen.device().type() == c10::DeviceType::CPU,
              "the default CPU generator is not a CPU generator");
  return gen.get<at::CPUGeneratorImpl>();
}

// Under the generator's mutex, as get_state/set_state are used.
void get_cpu_state(at::CPUGeneratorImpl* g, CpuState& out) {
  std::lock_guard<std::mutex> lock(g->mutex_);
  out.engine.emplace(g->engine());
  out.next_float_normal = g->next_float_normal_sample();
  out.next_double_normal = g->next_double_normal_sample();
}

void set_cpu_state(at::CPUGeneratorImpl* g, const CpuState& s) {
  TORCH_CHECK(s.engine.has_value(), "no CPU generator state was saved");
  std::lock_guard<std::mutex> lock(g->mutex_);
  g->set_engine(*s.engine);
  g->set_next_float_normal_sample(s.next_float_normal);
  g->set_next_double_normal_sample(s.next_double_normal);
}

void seed(at::Generator gen, uint64_t s) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(s);
}

}  // namespace

extern "C" {

}  // extern "C"

namespace {

// The CUDA devices named (`n` >= 0), or all of them (`n` < 0); each named
// one must exist.
std::vector<int> devices(const int32_t* list, int32_t n) {
  int count = cuda_devices();
  std::vector<int> out;
  if (n < 0) {
    for (int i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  for (int32_t k = 0; k < n; ++k) {
    TORCH_CHECK(list[k] >= 0 && list[k] < count, "no CUDA device ", list[k], " (", count,
                count == 1 ? " device" : " devices", " present)");
    out.push_back(list[k]);
  }
  return out;
}

}  // namespace

extern "C" {

tch_scope_status tch_scope_rng_save(const int32_t* list, int32_t n, void** state) {
  return tch_scope::guarded([&] {
    auto s = std::make_unique<RngState>();
    auto cuda = devices(list, n);
    get_cpu_state(cpu_generator(), s->cpu);
    for (int i : cuda) s->cuda.emplace_back(i, get_state(cuda_generator(i)));
    *state = s.release();
  });
}

tch_scope_status tch_scope_rng_restore(const void* state) {
  return tch_scope::guarded([&] {
    auto* s = static_cast<const RngState*>(state);
    set_cpu_state(cpu_generator(), s->cpu);
    for (const auto& [i, cuda] : s->cuda) set_state(cuda_generator(i), cuda);
  });
}

void tch_scope_rng_free(void* state) { delete static_cast<RngState*>(state); }

tch_scope_status tch_scope_rng_seed(uint64_t s, const int32_t* list, int32_t n) {
  return tch_scope::guarded([&] {
    auto cuda = devices(list, n);
    seed(at::detail::getDefaultCPUGenerator(), s);
    for (int i : cuda) seed(cuda_generator(i), s);
  });
}

}  // extern "C"

// The generators' states as byte tensors, as `torch.get_rng_state()` and
// `torch.cuda.get_rng_state(i)` give them, for a checkpoint's file: the
// CPU generator is device -1, CUDA device i is i. A returned tensor is a
// new `at::Tensor*` (tch's C_tensor) the caller owns.
extern "C" {

int32_t tch_scope_rng_cuda_count() {
  try {
    return cuda_devices();
  } catch (...) {
    return 0;
  }
}

tch_scope_status tch_scope_rng_get_state(int32_t device, void** out) {
  return tch_scope::guarded([&] {
    at::Generator gen = device < 0 ? at::detail::getDefaultCPUGenerator() : [&] {
      TORCH_CHECK(device < cuda_devices(), "no CUDA device ", device, " (", cuda_devices(),
                  " present)");
      return cuda_generator(device);
    }();
    *out = new at::Tensor(get_state(gen));
  });
}

tch_scope_status tch_scope_rng_set_state(int32_t device, const void* state) {
  return tch_scope::guarded([&] {
    const auto& t = *static_cast<const at::Tensor*>(state);
    at::Generator gen = device < 0 ? at::detail::getDefaultCPUGenerator() : [&] {
      TORCH_CHECK(device < cuda_devices(), "the checkpoint holds the generator of CUDA device ",
                  device, ", and only ", cuda_devices(), " are present");
      return cuda_generator(device);
    }();
    set_state(gen, t);
  });
}

}  // extern "C"
