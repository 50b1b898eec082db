//! Grad mode and inference mode: `torch.no_grad`, `torch.enable_grad`,
//! `torch.set_grad_enabled` and `torch.inference_mode`.
//!
//! Both are per OS thread in libtorch, so the guards are `!Send`: a thread
//! spawned inside `no_grad` starts with grad mode on, as in PyTorch.

use std::convert::Infallible;
use std::ffi::c_void;

use crate::Scope;
use crate::thread_state::{self, Tls};

/// What `tch_scope_inference_enter` saves for the exit: the shim's
/// `tch_scope_inference_saved` (`csrc/grad.h`, which asserts the same layout).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct InferenceSaved {
    included: u64,
    excluded: u64,
    autograd_flags: u8,
}

const _: () = {
    use std::mem::offset_of;
    assert!(size_of::<InferenceSaved>() == 24 && align_of::<InferenceSaved>() == 8);
    assert!(offset_of!(InferenceSaved, included) == 0);
    assert!(offset_of!(InferenceSaved, excluded) == 8);
    assert!(offset_of!(InferenceSaved, autograd_flags) == 16);
};

unsafe extern "C" {
    fn tch_scope_grad_exchange(state: *mut c_void, enabled: bool) -> bool;
    fn tch_scope_grad_get(state: *mut c_void) -> bool;
    fn tch_scope_inference_enter(
        state: *mut c_void,
        keys: *mut c_void,
        enabled: bool,
        saved: *mut InferenceSaved,
    );
    fn tch_scope_inference_exit(
        state: *mut c_void,
        keys: *mut c_void,
        saved: *const InferenceSaved,
    );
    fn tch_scope_inference_get(state: *mut c_void) -> bool;
}

/// `torch.no_grad()`: grad mode off for the scope.
///
/// ```
/// use tch_scope::{NoGrad, Scope, is_grad_enabled};
/// let guard = NoGrad.enter().unwrap();
/// assert!(!is_grad_enabled());
/// drop(guard);
/// assert!(is_grad_enabled());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct NoGrad;

/// `torch.enable_grad()`: grad mode on for the scope.
///
/// ```no_run
/// use tch_scope::{EnableGrad, NoGrad, Scope, is_grad_enabled};
/// let _outer = NoGrad.enter().unwrap();
/// let inner = EnableGrad.enter().unwrap();
/// assert!(is_grad_enabled());
/// drop(inner);
/// assert!(!is_grad_enabled());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct EnableGrad;

/// `torch.set_grad_enabled(flag)`: grad mode set to `flag` for the scope.
///
/// ```no_run
/// use tch_scope::{Grad, Scope, is_grad_enabled};
/// let training = false;
/// let _g = Grad(training).enter().unwrap();
/// assert_eq!(is_grad_enabled(), training);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Grad(pub bool);

/// Restores the grad mode found on entry. `!Send`: grad mode is per thread.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct GradGuard {
    state: *mut c_void,
    previous: bool,
}

#[inline]
fn set_grad(enabled: bool) -> Result<GradGuard, Infallible> {
    let t = thread_state::get();
    // SAFETY: `t.autograd` is this thread's AutogradState, valid for the
    // thread's life; the guard is !Send so it is used on this thread only.
    let previous = unsafe { tch_scope_grad_exchange(t.autograd, enabled) };
    Ok(GradGuard {
        state: t.autograd,
        previous,
    })
}

impl Drop for GradGuard {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: see `set_grad`; same thread, pointer still valid.
        unsafe { tch_scope_grad_exchange(self.state, self.previous) };
    }
}

impl Scope for NoGrad {
    type Guard = GradGuard;
    type Error = Infallible;
    const EXIT_CAN_FAIL: bool = false;

    #[inline]
    fn enter(&mut self) -> Result<GradGuard, Infallible> {
        set_grad(false)
    }
}

impl Scope for EnableGrad {
    type Guard = GradGuard;
    type Error = Infallible;
    const EXIT_CAN_FAIL: bool = false;

    #[inline]
    fn enter(&mut self) -> Result<GradGuard, Infallible> {
        set_grad(true)
    }
}

impl Scope for Grad {
    type Guard = GradGuard;
    type Error = Infallible;
    const EXIT_CAN_FAIL: bool = false;

    #[inline]
    fn enter(&mut self) -> Result<GradGuard, Infallible> {
        set_grad(self.0)
    }
}

/// `torch.inference_mode()`: `c10::InferenceMode` for the scope — grad mode
/// off, and tensors made inside are inference tensors that autograd refuses
/// later. `enable_grad` nested inside turns grad mode back on, but tensors
/// made there still don't require grad (as in PyTorch).
///
/// ```
/// use tch_scope::{InferenceMode, Scope, is_inference_mode_enabled};
/// let g = InferenceMode.enter().unwrap();
/// assert!(is_inference_mode_enabled());
/// let t = tch::Tensor::ones([2], (tch::Kind::Float, tch::Device::Cpu));
/// drop(g);
/// assert!(t.is_inference());
/// assert!(!is_inference_mode_enabled());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct InferenceMode;

/// `torch.inference_mode(mode)`: `c10::InferenceMode(mode)` for the scope.
/// `SetInferenceMode(true)` is [`InferenceMode`]; `SetInferenceMode(false)`
/// turns inference mode off inside an outer one — and, as in PyTorch, turns
/// grad mode on (c10 sets grad mode to `!mode`), so tensors made there are
/// normal tensors that autograd can record.
///
/// ```no_run
/// use tch_scope::{InferenceMode, Scope, SetInferenceMode, is_grad_enabled, is_inference_mode_enabled};
/// let _outer = InferenceMode.enter().unwrap();
/// let inner = SetInferenceMode(false).enter().unwrap();
/// assert!(!is_inference_mode_enabled() && is_grad_enabled());
/// drop(inner);
/// assert!(is_inference_mode_enabled() && !is_grad_enabled());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct SetInferenceMode(pub bool);

/// Restores the autograd flags and dispatch keys found on entry.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
pub struct InferenceModeGuard {
    tls: Tls,
    saved: InferenceSaved,
    _not_send: crate::PhantomNotSend,
}

impl std::fmt::Debug for InferenceModeGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InferenceModeGuard").finish_non_exhaustive()
    }
}

impl Scope for InferenceMode {
    type Guard = InferenceModeGuard;
    type Error = Infallible;
    const EXIT_CAN_FAIL: bool = false;

    #[inline]
    fn enter(&mut self) -> Result<InferenceModeGuard, Infallible> {
        SetInferenceMode(true).enter()
    }
}

impl Scope for SetInferenceMode {
    type Guard = InferenceModeGuard;
    type Error = Infallible;
    const EXIT_CAN_FAIL: bool = false;

    #[inline]
    fn enter(&mut self) -> Result<InferenceModeGuard, Infallible> {
        let tls = thread_state::get();
        let mut saved = InferenceSaved::default();
        // SAFETY: this thread's pointers (see thread_state.rs); `saved` is writable.
        unsafe { tch_scope_inference_enter(tls.autograd, tls.keys, self.0, &mut saved) };
        Ok(InferenceModeGuard {
            tls,
            saved,
            _not_send: crate::PhantomNotSend::NEW,
        })
    }
}

impl Drop for InferenceModeGuard {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: same thread as entry (the guard is !Send).
        unsafe { tch_scope_inference_exit(self.tls.autograd, self.tls.keys, &self.saved) };
    }
}

/// Whether grad mode is on in this thread (`torch.is_grad_enabled()`).
///
/// ```no_run
/// assert!(tch_scope::is_grad_enabled());
/// ```
pub fn is_grad_enabled() -> bool {
    // SAFETY: this thread's AutogradState.
    unsafe { tch_scope_grad_get(thread_state::get().autograd) }
}

/// Whether inference mode is on in this thread
/// (`torch.is_inference_mode_enabled()`).
///
/// ```no_run
/// assert!(!tch_scope::is_inference_mode_enabled());
/// ```
pub fn is_inference_mode_enabled() -> bool {
    // SAFETY: this thread's AutogradState.
    unsafe { tch_scope_inference_get(thread_state::get().autograd) }
}

#[cfg(test)]
mod tests {
    use super::{EnableGrad, Grad, InferenceMode, NoGrad, SetInferenceMode};
    use crate::{Scope, is_grad_enabled, is_inference_mode_enabled};

    #[test]
    fn a_fresh_thread_has_grad_on_and_inference_mode_off() {
        let fresh = std::thread::spawn(|| (is_grad_enabled(), is_inference_mode_enabled()));
        assert_eq!(fresh.join().unwrap(), (true, false));
    }

    #[test]
    fn enable_grad_and_grad_flag_nest_inside_no_grad() {
        let outer = NoGrad.enter().unwrap();
        let inner = EnableGrad.enter().unwrap();
        assert!(is_grad_enabled());
        drop(inner);
        assert!(!is_grad_enabled());
        for flag in [false, true] {
            let g = Grad(flag).enter().unwrap();
            assert_eq!(is_grad_enabled(), flag);
            drop(g);
        }
        drop(outer);
        assert!(is_grad_enabled());
    }

    #[test]
    fn set_inference_mode_false_inside_inference_mode_turns_grad_on() {
        let outer = InferenceMode.enter().unwrap();
        let inner = SetInferenceMode(false).enter().unwrap();
        assert!(!is_inference_mode_enabled() && is_grad_enabled());
        drop(inner);
        assert!(is_inference_mode_enabled() && !is_grad_enabled());
        drop(outer);
        assert!(!is_inference_mode_enabled() && is_grad_enabled());
    }
}
