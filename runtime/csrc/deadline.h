// C++ only, not part of the C ABI: a thread's open deadline (deadline.cpp),
// so that context.cpp can carry it to another thread. The dispatch key
// that makes libtorch check it is in the thread's TLS dispatch-key set,
// which at::ThreadLocalState carries on its own.
#pragma once
#include <cstdint>
#include <limits>

#include "common.h"

namespace tch_scope::deadline {

// `at` when no deadline is open.
constexpr int64_t kNone = std::numeric_limits<int64_t>::max();

// The earliest open deadline of a thread: operators fail from `at` on
// (steady-clock nanoseconds). A budget (`deadline(d)`, `instant` false)
// was `budget` nanoseconds after `start`; an instant (`deadline(until =
// t)`) has no budget, and `start` is its scope's first entry.
struct Open {
  int64_t at = kNone;
  int64_t budget = 0;
  int64_t start = 0;
  bool instant = false;
};

// Steady-clock nanoseconds (CLOCK_MONOTONIC, as Rust's Instant on Linux).
int64_t now_ns() noexcept;

// The calling thread's open deadline.
Open current() noexcept;

// Registers the dispatcher check, once per process (throws if another
// library took its dispatch key). Any Open with a deadline was opened
// after it, so set() of one needs no new call.
void register_check();

// Makes `open` the calling thread's deadline.
void set(const Open& open) noexcept;

}  // namespace tch_scope::deadline

// The C ABI of the exclusion, declared here beside its only user's header
// rather than in context.h: a scope's exit (a checkpoint's save) runs
// operators that an open deadline must not refuse.
extern "C" {
// Takes the deadline's dispatch key out of the calling thread's dispatch
// (the TLS "excluded" set, as c10::impl::ExcludeDispatchKeyGuard does), so
// no open deadline refuses its operators; returns whether it was excluded
// already (bit 0; bit 1: a stop's refusal was), for
// tch_scope_deadline_unexclude. Excludes a stop's refusal too. Never throws.
uint8_t tch_scope_deadline_exclude(void);
// Puts the exclusion back as tch_scope_deadline_exclude found it (`was`).
void tch_scope_deadline_unexclude(uint8_t was);

// A stop on a signal (runtime/src/stop/): the fallthrough fallback on the
// stop's key, registered once (fails if another library holds the key).
tch_scope_status tch_scope_stop_prepare(void);
// Switches the refusal on: every operator of a thread that includes the
// key is refused with "<head> at <op><tail>". Once per process.
tch_scope_status tch_scope_stop_refuse(const char* head, const char* tail);
// Includes the stop's key in this thread's dispatch; returns whether it was.
bool tch_scope_stop_include(void);
// Puts the key's inclusion back to `was`.
void tch_scope_stop_restore(bool was);
// Excludes the stop's key on this thread (a `steps` loop: a stop ends it
// at a step boundary instead); returns whether it was excluded.
bool tch_scope_stop_defer(void);
// Puts the key's exclusion back to `was`.
void tch_scope_stop_undefer(bool was);
}
