// `deadline(duration)`: the next operator after the deadline throws.
//
// A thread-local RecordFunction callback would see every operator, but
// libtorch catches what a callback throws (it logs "Exception in
// RecordFunction callback" and runs the operator anyway). A boxed fallback
// on a dispatch key that is in this thread's TLS "included" set runs before
// every operator's kernel and may throw; it is there only while a deadline
// is open on the thread, so other threads and code outside pay nothing.
// The key is TESTING_ONLY_GenericMode: libtorch registers nothing on it,
// and its documented use is exactly this (a mode toggled through the TLS
// set, with a fallback). Measured on a 4-float add: +90 ns per operator,
// like a thread-local RecordFunction callback (+100 ns).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.h"
#include "context.h"
#include "deadline.h"

namespace {

using tch_scope::deadline::kNone;
using tch_scope::deadline::now_ns;
constexpr auto kKey = c10::DispatchKey::TESTING_ONLY_GenericMode;

// The earliest open deadline of this thread, and the last one that passed.
struct State {
  tch_scope::deadline::Open open;
  uint64_t trips = 0;
  int64_t trip_at = kNone;
  std::string trip;
};
thread_local State state;

// 100 ms, 2.5 ms, 750 us.
std::string duration(int64_t ns) {
  char buf[48];
  if (ns >= 10'000'000) {
    std::snprintf(buf, sizeof buf, "%lld ms", static_cast<long long>(ns / 1'000'000));
  } else if (ns >= 1'000'000) {
    long long tenths = ns / 100'000;
    if (tenths % 10 == 0) {
      std::snprintf(buf, sizeof buf, "%lld ms", tenths / 10);
    } else {
      std::snprintf(buf, sizeof buf, "%lld.%lld ms", tenths / 10, tenths % 10);
    }
  } else {
    std::snprintf(buf, sizeof buf, "%lld us", static_cast<long long>(ns / 1'000));
  }
  return buf;
}

void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  State& s = state;
  const auto& d = s.open;
  if (d.at != kNone) {
    int64_t now = now_ns();
    if (now >= d.at) [[unlikely]] {
      // A budget counts from its scope's entry; an instant has no budget,
      // so say how long ago it passed.
      s.trip = d.instant ? "deadline passed " + duration(now - d.at) + " ago"
                         : "deadline of " + duration(d.budget) + " exceeded after " +
                               duration(now - d.start);
      s.trip += " at ";
      s.trip += op.operator_name().name;
      s.trip_at = d.at;
      ++s.trips;
      throw std::runtime_error(s.trip);
    }
  }
  // The operators this one calls (a composite's parts: `linear` is
  // `addmm`, `batch_norm` five more) are not checked again: each would box
  // its arguments here once more, and a request's forward paid ~20 us for
  // that (make load). The check is before each operator the caller or the
  // TorchScript interpreter runs, which is what the deadline promises.
  c10::impl::ExcludeDispatchKeyGuard parts_unchecked(kKey);
  op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kKey), stack);
}

// The key a stop's refusal lives on (see tch_scope_stop_prepare below);
// a functionality key below kKey, so a deadline's check runs first.
constexpr auto kStopKey = c10::DispatchKey::TESTING_ONLY_GenericWrapper;
// `trip_at` of a refusal by a stop: no deadline's instant (those are >= 0).
constexpr int64_t kStopAt = std::numeric_limits<int64_t>::min();
// Set once, by the watcher thread, before any operator can reach the kernel.
std::string stop_head;
std::string stop_tail;

// Refuses every operator that reaches it: "stopped by SIGINT at aten::mm:
// ...". Counted as a deadline's trip is, so that a checkpoint sees its body
// fail and a `deadline` scope around the operator ends with the stop's
// message.
void stop_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*) {
  State& s = state;
  s.trip = stop_head + " at " + op.operator_name().name + stop_tail;
  s.trip_at = kStopAt;
  ++s.trips;
  throw std::runtime_error(s.trip);
}

// Registered at the first deadline, for the life of the process.
void ensure_registered() {
  static c10::RegistrationHandleRAII* handle = [] {
    auto& dispatcher = c10::Dispatcher::singleton();
    if (dispatcher.hasBackendFallbackForDispatchKey(kKey)) {
      throw std::runtime_error(
          "another library registered a fallback on dispatch key TESTING_ONLY_GenericMode, "
          "which deadline needs");
    }
    return new c10::RegistrationHandleRAII(dispatcher.registerFallback(
        kKey, c10::KernelFunction::makeFromBoxedFunction<&fallback>(), "tch-scope deadline"));
  }();
  (void)handle;
}

}  // namespace

namespace tch_scope::deadline {

int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Open current() noexcept { return state.open; }

void register_check() { ensure_registered(); }

void set(const Open& open) noexcept { state.open = open; }

}  // namespace tch_scope::deadline

namespace {

// Opens `next` on this thread (the earliest open deadline applies) and
// saves what exit puts back.
void open(const tch_scope::deadline::Open& next, tch_scope_deadline_saved* saved) {
  ensure_registered();
  State& s = state;
  saved->at = s.open.at;
  saved->budget = s.open.budget;
  saved->start = s.open.start;
  saved->instant = s.open.instant;
  saved->included = c10::impl::tls_is_dispatch_key_included(kKey);
  saved->trips = s.trips;
  // The earliest wins; on a tie, the outer one (it was there first).
  if (next.at < s.open.at) s.open = next;
  saved->effective_at = s.open.at;
  c10::impl::tls_set_dispatch_key_included(kKey, true);
}

}  // namespace

extern "C" {

tch_scope_status tch_scope_deadline_enter(int64_t budget_ns, int64_t* start_ns,
                                          tch_scope_deadline_saved* saved) {
  return tch_scope::guarded([&] {
    if (*start_ns == 0) *start_ns = now_ns();
    int64_t at = budget_ns > kNone - *start_ns ? kNone - 1 : *start_ns + budget_ns;
    open({.at = at, .budget = budget_ns, .start = *start_ns, .instant = false}, saved);
  });
}

tch_scope_status tch_scope_deadline_enter_until(int64_t from_now_ns, int64_t* at_ns, int64_t* start_ns,
                                                tch_scope_deadline_saved* saved) {
  return tch_scope::guarded([&] {
    if (*start_ns == 0) {
      int64_t now = now_ns();
      *start_ns = now;
      // Saturating: far past or far future instants stay in range.
      if (from_now_ns >= 0) {
        *at_ns = from_now_ns > kNone - 1 - now ? kNone - 1 : now + from_now_ns;
      } else {
        *at_ns = from_now_ns < std::numeric_limits<int64_t>::min() + now ? 0 : now + from_now_ns;
      }
    }
    open({.at = *at_ns, .budget = 0, .start = *start_ns, .instant = true}, saved);
  });
}

void tch_scope_deadline_exit(int64_t at, int64_t budget, int64_t start, bool instant,
                             bool included) {
  state.open = {.at = at, .budget = budget, .start = start, .instant = instant};
  c10::impl::tls_set_dispatch_key_included(kKey, included);
}

uint64_t tch_scope_deadline_trips(int64_t* trip_at) {
  *trip_at = state.trip_at;
  return state.trips;
}

const char* tch_scope_deadline_trip_message(void) { return state.trip.c_str(); }

// Exclusion, not inclusion: an excluded key wins over an included one, so
// the deadline entered by a scope inside the exit (which sets "included")
// stays off too, and the open deadlines' state is untouched for when the
// exclusion ends. A stop's refusal (below) is excluded with it: an exit's
// save must run after a stop as after a deadline.
uint8_t tch_scope_deadline_exclude(void) {
  uint8_t was = (c10::impl::tls_is_dispatch_key_excluded(kKey) ? 1 : 0) |
                (c10::impl::tls_is_dispatch_key_excluded(kStopKey) ? 2 : 0);
  c10::impl::tls_set_dispatch_key_excluded(kKey, true);
  c10::impl::tls_set_dispatch_key_excluded(kStopKey, true);
  return was;
}

void tch_scope_deadline_unexclude(uint8_t was) {
  c10::impl::tls_set_dispatch_key_excluded(kKey, (was & 1) != 0);
  c10::impl::tls_set_dispatch_key_excluded(kStopKey, (was & 2) != 0);
}

// ---- A stop (SIGINT, SIGTERM, ...; runtime/src/stop/) refuses operators.
//
// The threads inside an open checkpoint have kStopKey in their TLS
// "included" set from its entry on. Until a stop arrives the key has a
// fallthrough fallback: the dispatcher masks a fallthrough key out of the
// set it computes, so those threads pay nothing per operator (the boxed
// check of a deadline would cost ~90 ns on each). A signal handler can't
// touch another thread's TLS or the dispatcher, so when a stop arrives, a
// watcher thread registers the refusing kernel on every operator
// (registerImpl: a per-operator kernel wins over the fallthrough
// fallback, and each operator switches from one to the other without a
// moment of neither). From then on, the next operator of those threads is
// refused with the stop's message.

tch_scope_status tch_scope_stop_prepare(void) {
  return tch_scope::guarded([] {
    static c10::RegistrationHandleRAII* handle = [] {
      auto& dispatcher = c10::Dispatcher::singleton();
      if (dispatcher.hasBackendFallbackForDispatchKey(kStopKey)) {
        throw std::runtime_error(
            "another library registered a fallback on dispatch key TESTING_ONLY_GenericWrapper, "
            "which the stop on a signal needs");
      }
      return new c10::RegistrationHandleRAII(dispatcher.registerFallback(
          kStopKey, c10::KernelFunction::makeFallthrough(), "tch-scope stop (not stopped)"));
    }();
    (void)handle;
  });
}

tch_scope_status tch_scope_stop_refuse(const char* head, const char* tail) {
  return tch_scope::guarded([&] {
    static bool done = false;
    if (done) return;
    done = true;
    stop_head = head;
    stop_tail = tail;
    auto& dispatcher = c10::Dispatcher::singleton();
    // Kept for the life of the process: a stop ends it.
    static auto* handles = new std::vector<c10::RegistrationHandleRAII>();
    for (const auto& name : dispatcher.getAllOpNames()) {
      handles->push_back(dispatcher.registerImpl(
          name, kStopKey, c10::KernelFunction::makeFromBoxedFunction<&stop_kernel>(), std::nullopt,
          nullptr, "tch-scope stop"));
    }
  });
}

bool tch_scope_stop_include(void) {
  bool was = c10::impl::tls_is_dispatch_key_included(kStopKey);
  c10::impl::tls_set_dispatch_key_included(kStopKey, true);
  return was;
}

void tch_scope_stop_restore(bool was) { c10::impl::tls_set_dispatch_key_included(kStopKey, was); }

bool tch_scope_stop_defer(void) {
  bool was = c10::impl::tls_is_dispatch_key_excluded(kStopKey);
  c10::impl::tls_set_dispatch_key_excluded(kStopKey, true);
  return was;
}

void tch_scope_stop_undefer(bool was) { c10::impl::tls_set_dispatch_key_excluded(kStopKey, was); }

}  // extern "C"
