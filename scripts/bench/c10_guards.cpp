// Enter + leave cost of libtorch's own C++ guards: the floor a binding can
// reach by calling them (`make bench` builds this with -O2 against the
// bootstrap's libtorch). Prints JSON {word: ns}: the median of 7 runs of
// a loop of N enter + leave pairs.
//
// autocast has no C++ guard; its row is the sequence torch.autocast's
// __enter__/__exit__ run (also what tch-scope's shim runs).
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/anomaly_mode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

// Keeps the compiler from merging or dropping loop iterations.
inline void clobber() { asm volatile("" ::: "memory"); }

template <class F>
double ns_per_call(F f) {
  constexpr long kN = 2'000'000;
  std::vector<double> runs;
  for (int r = 0; r < 7; ++r) {
    auto t = std::chrono::steady_clock::now();
    for (long i = 0; i < kN; ++i) {
      f();
      clobber();
    }
    std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - t;
    runs.push_back(d.count() / kN);
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

}  // namespace

int main() {
  std::printf("{\n");
  std::printf(" \"no_grad\": %.2f,\n", ns_per_call([] { c10::AutoGradMode g(false); }));
  std::printf(" \"enable_grad\": %.2f,\n", ns_per_call([] { c10::AutoGradMode g(true); }));
  std::printf(" \"grad\": %.2f,\n", ns_per_call([] { c10::AutoGradMode g(false); }));
  std::printf(" \"inference_mode\": %.2f,\n", ns_per_call([] { c10::InferenceMode g; }));
  std::printf(" \"detect_anomaly\": %.2f,\n",
              ns_per_call([] { torch::autograd::DetectAnomalyGuard g(true); }));
  std::printf(" \"record\": %.2f,\n", ns_per_call([] { RECORD_FUNCTION("x", c10::ArrayRef<const c10::IValue>{}); }));
  std::printf(" \"autocast\": %.2f\n", ns_per_call([] {
    using namespace at::autocast;
    auto d = at::kCPU;
    bool cache = is_autocast_cache_enabled();
    bool was = is_autocast_enabled(d);
    auto dtype = get_autocast_dtype(d);
    set_autocast_enabled(d, true);
    set_autocast_dtype(d, at::kBFloat16);
    increment_nesting();
    set_autocast_cache_enabled(true);
    clobber();
    if (decrement_nesting() == 0) clear_cache();
    set_autocast_enabled(d, was);
    set_autocast_dtype(d, dtype);
    set_autocast_cache_enabled(cache);
  }));
  std::printf("}\n");
}
