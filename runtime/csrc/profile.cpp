// The Kineto profiler (what torch.profiler.profile drives) and user-scope
// ranges (torch.profiler.record_function). profiler_kineto.h compiles from
// the wheel's headers alone; ProfilerResult's destructor is out of line, so
// holding one needs no USE_KINETO.
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <algorithm>
#include <set>
#include <utility>
#include <vector>
#include <string>

#include "common.h"
#include "context.h"
#include "tensor_memory.h"

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

namespace {

// The name lives beside the RecordFunction for the whole range.
struct Range {
  std::string name;
  at::RecordFunction fn{at::RecordScope::USER_SCOPE};
  bool nvtx = false;
};

// The CUDA profiler stubs are registered by libtorch_cuda; the default ones
// report "not enabled" and throw on use.
const torch::profiler::impl::ProfilerStubs* nvtx() {
  auto* stubs = torch::profiler::impl::cudaStubs();
  return stubs && stubs->enabled() ? stubs : nullptr;
}

}  // namespace

// Kineto's log threshold (libkineto/include/Logger.h, exported by
// libtorch_cpu; the wheel ships no Kineto headers). Its levels run VERBOSE 0
// .. USDT 5; 6 is above all of them.
namespace libkineto {
class Logger {
 public:
  static std::atomic_int severityLevel_;
};
}  // namespace libkineto

namespace {

constexpr int kKinetoSilent = 6;
// The threshold before a CPU-only session quieted it; -1: untouched.
int kineto_level_before = -1;

// On a machine without CUDA, Kineto logs "gpuGetDeviceCount failed with
// code 35" (an ERROR) and USDT start/stop lines for every session: noise
// for a CPU-only profile. Quieted for the session only, after
// prepareProfiler (whose first call initializes Kineto and sets the
// threshold), and never when the user chose one with KINETO_LOG_LEVEL.
void quiet_kineto(bool cuda) {
  if (cuda || std::getenv("KINETO_LOG_LEVEL") != nullptr) return;
  kineto_level_before = libkineto::Logger::severityLevel_.exchange(kKinetoSilent);
}

void restore_kineto() {
  if (kineto_level_before < 0) return;
  libkineto::Logger::severityLevel_.store(kineto_level_before);
  kineto_level_before = -1;
}

}  // namespace

extern "C" {

tch_scope_status tch_scope_profile_start(bool cuda, bool memory) {
  return tch_scope::guarded([&] {
    // An open tensor_memory scope's reporter makes way for the profiler
    // (see tensor_memory.cpp); the profiler then records memory for it.
    bool tensor_memory = tch_scope::tensor_memory::lift();
    try {
      ProfilerConfig config(ProfilerState::KINETO, /*report_input_shapes=*/false,
                            /*profile_memory=*/memory || tensor_memory);
      std::set<ActivityType> activities{ActivityType::CPU};
      if (cuda) activities.insert(ActivityType::CUDA);
      prof::prepareProfiler(config, activities);
      quiet_kineto(cuda);
      try {
        prof::enableProfiler(config, activities);
      } catch (...) {
        restore_kineto();
        throw;
      }
    } catch (...) {
      tch_scope::tensor_memory::unlift(nullptr, 0);
      throw;
    }
  });
}

namespace {
// The profile's memory events, in the order they happened, for the
// tensor_memory scopes whose reporter made way for it.
std::vector<tch_scope::tensor_memory::Event> memory_events(const prof::ProfilerResult& result) {
  std::vector<std::pair<uint64_t, tch_scope::tensor_memory::Event>> timed;
  for (const auto& e : result.events()) {
    if (e.name() != "[memory]") continue;
    c10::Device device(e.deviceType(), static_cast<c10::DeviceIndex>(e.deviceIndex()));
    timed.push_back({e.startNs(), {e.nBytes(), device}});
  }
  std::stable_sort(timed.begin(), timed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<tch_scope::tensor_memory::Event> out;
  out.reserve(timed.size());
  for (auto& [_, e] : timed) out.push_back(e);
  return out;
}
}  // namespace

tch_scope_status tch_scope_profile_stop(const char* path) {
  return tch_scope::guarded([&] {
    struct Restore {
      ~Restore() {
        restore_kineto();
        // Where the profiler failed to stop: no events (a no-op otherwise).
        tch_scope::tensor_memory::unlift(nullptr, 0);
      }
    } restore;
    auto result = prof::disableProfiler();
    if (!result) throw std::runtime_error("the profiler returned no result");
    // The profiler is out of the slot: the reporter of any open
    // tensor_memory scope goes back, having counted what the profile saw.
    auto events = memory_events(*result);
    tch_scope::tensor_memory::unlift(events.data(), events.size());
    result->save(path);
  });
}

tch_scope_status tch_scope_record_begin(const char* name, void** range) {
  return tch_scope::guarded([&] {
    auto r = std::make_unique<Range>();
    r->name = name;
    if (r->fn.isActive()) r->fn.before(std::string_view(r->name));
    if (auto* stubs = nvtx()) {
      stubs->rangePush(r->name.c_str());
      r->nvtx = true;
    }
    *range = r.release();
  });
}

void tch_scope_record_end(void* range) {
  auto* r = static_cast<Range*>(range);
  if (r->nvtx) {
    try { nvtx()->rangePop(); } catch (...) {}
  }
  delete r;  // ~RecordFunction ends the range
}

}  // extern "C"
