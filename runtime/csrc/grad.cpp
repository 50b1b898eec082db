// Grad mode and inference mode on c10's thread-local state.
#include <c10/core/AutogradState.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "grad.h"

using c10::AutogradState;
using c10::impl::PODLocalDispatchKeySet;

namespace {
// AutogradState's grad-layout-enforcement flag is newer than libtorch 2.11;
// where it is missing there is nothing to save or set. (Templates, so the
// branch not taken is never compiled.)
template <class S>
bool grad_layout(const S& s) {
  if constexpr (requires { s.get_grad_layout_enforcement_enabled(); }) {
    return s.get_grad_layout_enforcement_enabled();
  } else {
    return false;
  }
}

template <class S>
void set_grad_layout(S& s, bool enabled) {
  if constexpr (requires { s.set_grad_layout_enforcement_enabled(enabled); }) {
    s.set_grad_layout_enforcement_enabled(enabled);
  }
}
}  // namespace

extern "C" {

tch_scope_status tch_scope_tls_pointers(void** autograd_state, void** dispatch_keys) {
  return tch_scope::guarded([&] {
    *autograd_state = &AutogradState::get_tls_state();
    *dispatch_keys = &c10::impl::raw_local_dispatch_key_set;
  });
}

bool tch_scope_grad_exchange(void* state, bool enabled) {
  auto* s = static_cast<AutogradState*>(state);
  bool old = s->get_grad_mode();
  s->set_grad_mode(enabled);
  return old;
}

bool tch_scope_grad_get(void* state) {
  return static_cast<AutogradState*>(state)->get_grad_mode();
}

// Bit layout of tch_scope_inference_saved::autograd_flags.
enum : uint8_t {
  kGrad = 1, kInference = 2, kFwGrad = 4, kMultithreading = 8, kViewReplay = 16, kGradLayout = 32,
};

// Mirrors c10::InferenceMode's constructor (c10/core/InferenceMode.h) on
// cached pointers: the same flags, the same dispatch-key changes.
void tch_scope_inference_enter(void* state, void* keys, bool enabled,
                               tch_scope_inference_saved* saved) {
  auto* s = static_cast<AutogradState*>(state);
  auto* k = static_cast<PODLocalDispatchKeySet*>(keys);
  saved->autograd_flags = (s->get_grad_mode() ? kGrad : 0) |
                          (s->get_inference_mode() ? kInference : 0) |
                          (s->get_fw_grad_mode() ? kFwGrad : 0) |
                          (s->get_multithreading_enabled() ? kMultithreading : 0) |
                          (s->get_view_replay_enabled() ? kViewReplay : 0) |
                          (grad_layout(*s) ? kGradLayout : 0);
  saved->included = k->included_;
  saved->excluded = k->excluded_;

  // c10 builds a fresh AutogradState(!en, en, !en, !en), whose other two
  // flags take their defaults.
  s->set_grad_mode(!enabled);
  s->set_inference_mode(enabled);
  s->set_fw_grad_mode(!enabled);
  s->set_multithreading_enabled(!enabled);
  s->set_view_replay_enabled(false);
  set_grad_layout(*s, true);

  c10::DispatchKeySet included = k->included();
  c10::DispatchKeySet excluded = k->excluded();
  included = enabled ? included.remove(c10::DispatchKey::ADInplaceOrView)
                     : included.add(c10::DispatchKey::ADInplaceOrView);
  excluded = enabled ? (excluded | c10::autograd_dispatch_keyset)
                     : (excluded - c10::autograd_dispatch_keyset);
  k->set_included(included);
  k->set_excluded(excluded);
}

void tch_scope_inference_exit(void* state, void* keys, const tch_scope_inference_saved* saved) {
  auto* s = static_cast<AutogradState*>(state);
  auto* k = static_cast<PODLocalDispatchKeySet*>(keys);
  uint8_t f = saved->autograd_flags;
  s->set_grad_mode(f & kGrad);
  s->set_inference_mode(f & kInference);
  s->set_fw_grad_mode(f & kFwGrad);
  s->set_multithreading_enabled(f & kMultithreading);
  s->set_view_replay_enabled(f & kViewReplay);
  set_grad_layout(*s, f & kGradLayout);
  k->included_ = saved->included;
  k->excluded_ = saved->excluded;
}

bool tch_scope_inference_get(void* state) {
  return static_cast<AutogradState*>(state)->get_inference_mode();
}

}  // extern "C"
