// Context::capture / with(ctx): a thread's libtorch state carried to
// another thread, as at::launch and the autograd engine carry it.
//
// at::ThreadLocalState holds most of it: the autograd flags (grad mode,
// inference mode's), the TLS dispatch-key sets (inference mode's keys, the
// autocast flags, an open deadline's key), the autocast dtypes, debug info
// and the RecordFunction TLS. Two pieces of per-thread state live outside
// it and travel beside it: autocast's cast-cache flag, and the deadline
// itself (deadline.cpp keeps it in a thread_local of its own; the key alone
// would make the check run with no deadline to check). The current CUDA
// device is the Rust side's business (scopes/device.rs).
//
// at::ThreadLocalStateGuard restores the whole ThreadLocalState it found
// on construction, not a diff: exits must be last in, first out, which the
// Rust guard (!Send, dropped in scope order) gives.
#include <ATen/ThreadLocalState.h>
#include <ATen/autocast_mode.h>
#include <c10/core/AutogradState.h>

#include <memory>

#include "common.h"
#include "context.h"
#include "deadline.h"

namespace {

namespace dl = tch_scope::deadline;

// Captured once, then only read (by any number of threads at once).
struct Captured {
  at::ThreadLocalState tls;
  dl::Open deadline = dl::current();
  bool cache = at::autocast::is_autocast_cache_enabled();
  bool grad = c10::AutogradState::get_tls_state().get_grad_mode();
  bool inference = c10::AutogradState::get_tls_state().get_inference_mode();
};

// The entering thread's own state, put back on exit. Members are destroyed
// in reverse order: `guard` (declared first) last.
struct Entered {
  explicit Entered(const Captured& c) : guard(c.tls) {}
  at::ThreadLocalStateGuard guard;
  dl::Open deadline;
  bool cache = false;
};

}  // namespace

extern "C" {

tch_scope_status tch_scope_context_capture(void** ctx) {
  return tch_scope::guarded([&] { *ctx = new Captured(); });
}

void tch_scope_context_free(void* ctx) { delete static_cast<Captured*>(ctx); }

void tch_scope_context_info(const void* ctx, bool* grad, bool* inference, int64_t* deadline_at,
                            int64_t* now) {
  const auto& c = *static_cast<const Captured*>(ctx);
  *grad = c.grad;
  *inference = c.inference;
  *deadline_at = c.deadline.at;
  *now = dl::now_ns();
}

tch_scope_status tch_scope_context_enter(const void* ctx, void** entered) {
  return tch_scope::guarded([&] {
    const auto& c = *static_cast<const Captured*>(ctx);
    dl::Open own = dl::current();
    bool cache = at::autocast::is_autocast_cache_enabled();
    // What can throw comes first, before anything of the thread changes.
    if (c.deadline.at != dl::kNone) dl::register_check();
    auto e = std::make_unique<Entered>(c);  // the captured TLS from here on
    e->deadline = own;
    e->cache = cache;
    dl::set(c.deadline);
    at::autocast::set_autocast_cache_enabled(c.cache);
    // As torch.autocast does: the cast cache lives while any autocast
    // (here, the captured one) is open on the thread.
    at::autocast::increment_nesting();
    *entered = e.release();
  });
}

tch_scope_status tch_scope_context_exit(void* entered) {
  std::unique_ptr<Entered> e(static_cast<Entered*>(entered));
  // None of these throws; they run whatever the status below says.
  bool outermost = at::autocast::decrement_nesting() == 0;
  at::autocast::set_autocast_cache_enabled(e->cache);
  dl::set(e->deadline);
  e.reset();  // ~ThreadLocalStateGuard: the thread's own TLS again
  return tch_scope::guarded([&] {
    if (outermost) at::autocast::clear_cache();
  });
}

}  // extern "C"
