// The `tensor_memory` scope: bytes of tensor storage allocated and freed on
// this thread while a scope is open.
//
// libtorch's allocators (the CPU allocator, the CUDA caching allocator)
// report each allocation and free to the thread's memory reporter: the
// `c10::MemoryReportingInfoBase` in the PROFILER_STATE slot of
// `c10::ThreadLocalDebugInfo` (c10/core/Allocator.h,
// `reportMemoryUsageToProfiler`). The CPU allocator asks the reporter's
// `memoryProfilingEnabled()` first. One reporter per thread, the hub, is
// in the slot while any scope of the thread is open and feeds every open
// scope, so nested scopes each keep their own peak and may close in any
// order.
//
// libtorch's profiler keeps its own state in the same slot and reads it back
// with a `static_cast` on every operator, so nothing may sit above it there:
// a scope refuses to open while a profiler owns the slot, and tch-scope's
// `profile` lifts the hub out while it runs, records memory itself, and hands
// its memory events to the hub when it stops (`lift` / `unlift`). The hub is a
// `ProfilerStateBase` with a disabled config, so code that asks "is a profiler
// on?" (`profilerEnabled()`) reads a valid "no" while it is in the slot.
//
// libtorch copies the slot to the threads that run work for this one (the
// autograd engine's device threads, `at::launch`, a `with(ctx)` of a
// captured Context), so reports may arrive from them: the hub locks. A
// scope opened on such a thread puts that thread's hub over the carried
// one and chains to it, so the carried scopes still count what it sees.
#include <torch/csrc/profiler/orchestration/observer.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.h"
#include "tensor_memory.h"

namespace {

using torch::profiler::impl::ActiveProfilerType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;
using Counts = tch_scope_tensor_memory_counts;

c10::DebugInfoKind slot() { return c10::DebugInfoKind::PROFILER_STATE; }

uint64_t device_bit(c10::Device d) {
  if (d.is_cpu()) return 1;
  if (d.is_cuda()) {
    auto i = std::max<int>(d.index(), 0);
    if (i < 62) return uint64_t{1} << (1 + i);
  }
  return uint64_t{1} << 63;
}

class Hub final : public torch::profiler::impl::ProfilerStateBase,
                  public std::enable_shared_from_this<Hub> {
 public:
  Hub() : ProfilerStateBase(ProfilerConfig(ProfilerState::Disabled)) {}

  void reportMemoryUsage(void* /*ptr*/, int64_t size, size_t /*total_allocated*/,
                         size_t /*total_reserved*/, c10::Device device) override {
    count(size, device);
  }

  // Counts into this hub's scopes, then into the hubs it was put over.
  void count(int64_t size, c10::Device device) {
    std::shared_ptr<Hub> below = count_here(size, device);
    // chain_to refuses cycles; the bound covers chains relinked meanwhile.
    for (int hops = 0; below && hops < 64; ++hops) below = below->count_here(size, device);
  }

  // Chains to `below` (the hub that was in the slot), unless that would
  // make a cycle; nullptr: no chain.
  void chain_to(std::shared_ptr<Hub> below) {
    for (auto h = below; h; h = h->below()) {
      if (h.get() == this) {
        below = nullptr;
        break;
      }
    }
    std::lock_guard<std::mutex> g(mu_);
    below_ = std::move(below);
  }

  std::shared_ptr<Hub> below() {
    std::lock_guard<std::mutex> g(mu_);
    return below_;
  }

  // The CPU allocator records sizes (to report frees) only when this is on.
  bool memoryProfilingEnabled() const override { return n_open_.load(std::memory_order_relaxed) > 0; }

  ActiveProfilerType profilerType() override { return ActiveProfilerType::NONE; }

  std::shared_ptr<Hub> count_here(int64_t size, c10::Device device) {
    std::lock_guard<std::mutex> g(mu_);
    level_ += size;
    for (auto& o : open_) {
      auto& c = o.counts;
      c.net += size;
      if (size >= 0) {
        c.allocated += static_cast<uint64_t>(size);
      } else {
        c.freed += static_cast<uint64_t>(-size);
      }
      c.peak = std::max(c.peak, c.net);
      c.lowest = std::min(c.lowest, c.net);
      c.devices |= device_bit(device);
    }
    return below_;
  }

  uint64_t open(int64_t* level) {
    std::lock_guard<std::mutex> g(mu_);
    open_.push_back({++next_id_, Counts{}});
    n_open_.fetch_add(1, std::memory_order_relaxed);
    *level = level_;
    return next_id_;
  }

  // The scope's counts; false if `id` is not open here.
  bool close(uint64_t id, Counts* out) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = std::find_if(open_.begin(), open_.end(), [&](const Open& o) { return o.id == id; });
    if (it == open_.end()) return false;
    *out = it->counts;
    out->level = level_;
    open_.erase(it);
    n_open_.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }

  bool any_open() const { return n_open_.load(std::memory_order_relaxed) > 0; }

 private:
  struct Open {
    uint64_t id;
    Counts counts;
  };
  std::mutex mu_;
  std::vector<Open> open_;
  uint64_t next_id_ = 0;
  // Net bytes counted here since the hub was made: the thread's level.
  int64_t level_ = 0;
  std::atomic<int> n_open_{0};
  // The hub this one was put over (carried from another thread), if any.
  std::shared_ptr<Hub> below_;
};

struct ThreadHub {
  std::shared_ptr<Hub> hub;
  // The hub is in this thread's slot (possibly under debug info of other
  // kinds pushed later).
  bool installed = false;
  // A `profile` took it out and runs now.
  bool lifted = false;
};

ThreadHub& thread_hub() {
  static thread_local ThreadHub t;
  return t;
}

// True when the hub is the innermost debug info of the thread (so it can
// be popped). `_peek` throws when the innermost is of another kind.
bool hub_on_top(const ThreadHub& t) {
  try {
    return c10::ThreadLocalDebugInfo::_peek(slot()).get() == t.hub.get();
  } catch (const c10::Error&) {
    return false;
  }
}

// Puts the hub in the slot unless it is there, over and chained to a hub
// carried from another thread; throws if another reporter (a running
// profiler) owns it.
void install(ThreadHub& t) {
  auto* current = c10::ThreadLocalDebugInfo::get(slot());
  if (current == t.hub.get()) {
    t.installed = true;
    return;
  }
  auto* carried = dynamic_cast<Hub*>(current);
  if ((current != nullptr && carried == nullptr) || t.lifted) {
    throw std::runtime_error(
        "a libtorch profiler is recording this thread (a `profile` scope, or libtorch's own "
        "profiler), and it must be the thread's only memory reporter while it runs: open "
        "tensor_memory outside the profile (the profile then records memory and hands its "
        "events to the scope)");
  }
  t.hub->chain_to(carried != nullptr ? carried->shared_from_this() : nullptr);
  c10::ThreadLocalDebugInfo::_push(slot(), t.hub);
  t.installed = true;
}

// Takes the hub out of the slot when no scope is open. If other debug info
// was pushed over it and is still there, it stays, inert (its
// memoryProfilingEnabled() is false) until a scope opens again.
void uninstall(ThreadHub& t) {
  if (!t.installed || t.lifted || t.hub->any_open()) return;
  if (hub_on_top(t)) {
    c10::ThreadLocalDebugInfo::_pop(slot());
    t.installed = false;
  }
}

}  // namespace

namespace tch_scope::tensor_memory {

bool lift() {
  auto& t = thread_hub();
  if (!t.hub || !t.installed || t.lifted || !hub_on_top(t)) return false;
  c10::ThreadLocalDebugInfo::_pop(slot());
  t.installed = false;
  t.lifted = true;
  return t.hub->any_open();
}

void unlift(const Event* events, size_t n) {
  auto& t = thread_hub();
  if (!t.lifted) return;
  t.lifted = false;
  for (size_t i = 0; i < n; ++i) t.hub->count(events[i].size, events[i].device);
  if (t.hub->any_open()) {
    try {
      install(t);
    } catch (...) {
      // Another profiler took the slot meanwhile: the open scopes miss what
      // follows, but nothing sits above a profiler.
    }
  }
}

}  // namespace tch_scope::tensor_memory

extern "C" {

tch_scope_status tch_scope_tensor_memory_enter(uint64_t* id, int64_t* level) {
  return tch_scope::guarded([&] {
    auto& t = thread_hub();
    if (!t.hub) t.hub = std::make_shared<Hub>();
    install(t);
    *id = t.hub->open(level);
  });
}

tch_scope_status tch_scope_tensor_memory_exit(uint64_t id, tch_scope_tensor_memory_counts* out) {
  return tch_scope::guarded([&] {
    auto& t = thread_hub();
    if (!t.hub || !t.hub->close(id, out)) {
      throw std::runtime_error("no tensor_memory scope " + std::to_string(id) +
                               " is open on this thread");
    }
    uninstall(t);
  });
}

}  // extern "C"
