//! What the macros expand to. Not a public API: names and signatures here
//! change without notice.

pub use tch_scope_macros::{scoped_impl, try_scoped_impl};

pub use crate::private_ctx::*;

/// Test-only: makes the shim's `op` fail `times` times on this thread (see
/// `ffi::inject_fault`); the fault-injection tests in `tests/faults.rs`.
pub use crate::ffi::inject_fault;

#[cfg(feature = "distributed")]
pub use crate::dist::{Backend as DistBackend, Distributed};
pub use crate::{Chain, End, Scope, ScopeError, Scoped, Spanned};
use crate::{
    EnableGrad, Grad, InferenceMode, IntoScopeDevice, Mode, NoGrad, OnDevice, Trainable, When,
};

#[inline(always)]
pub fn no_grad() -> NoGrad {
    NoGrad
}

#[inline(always)]
pub fn enable_grad() -> EnableGrad {
    EnableGrad
}

#[inline(always)]
pub fn grad(enabled: bool) -> Grad {
    Grad(enabled)
}

#[inline(always)]
pub fn inference_mode() -> InferenceMode {
    InferenceMode
}

#[inline]
pub fn device(d: impl IntoScopeDevice) -> OnDevice {
    OnDevice::new(d)
}

#[inline]
pub fn device_cpu() -> OnDevice {
    OnDevice::new(tch::Device::Cpu)
}

#[inline]
pub fn device_mps() -> OnDevice {
    OnDevice::new(tch::Device::Mps)
}

#[inline]
pub fn device_cuda(index: usize) -> OnDevice {
    OnDevice::new(tch::Device::Cuda(index))
}

/// Identity, so that a non-scope gets `Scope`'s `on_unimplemented` message
/// at the user's expression — once: the opaque return type satisfies the
/// later `Scope` bounds, so no follow-on errors.
#[inline(always)]
pub fn with<S: Scope>(scope: S) -> impl Scope {
    scope
}

/// `eval(model)`: the macros pass `&(model)`, so the scope borrows the
/// model rather than moving it. The opaque return type keeps a
/// non-`Trainable` model to one error, at the user's expression.
#[inline(always)]
pub fn eval<T: Trainable + ?Sized>(model: &T) -> impl Scope {
    Mode::eval(model)
}

/// `train(model)`; see [`eval`].
#[inline(always)]
pub fn train<T: Trainable + ?Sized>(model: &T) -> impl Scope {
    Mode::train(model)
}

#[inline(always)]
pub fn when<S: Scope>(on: bool, scope: S) -> When<S> {
    When::new(on, scope)
}

#[inline(always)]
pub fn enter<S: Scope>(mut scope: S) -> Result<S::Guard, ScopeError> {
    scope.enter()
}

// `inline`, not `inline(always)`: LLVM honours `always` even in debug
// builds, and this body copied into every scope made a crate of 500 scoped
// functions compile 1.4x slower than the same guards by hand
// (scripts/bench/compile_cost.py). Release builds inline it anyway.
#[inline]
#[track_caller]
pub fn enter_or_panic<S: Scope>(mut scope: S) -> S::Guard {
    match scope.enter() {
        Ok(g) => g,
        Err(e) => panic_scope_error(e),
    }
}

/// `E::from(ScopeError)` for a scoped function returning `Result<_, E>`,
/// with a message that says what to do when `E` can't hold one.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot hold a `ScopeError`, which this function returns when a scope can't be entered",
    label = "the error type of a scoped function must implement `From<tch_scope::ScopeError>`",
    note = "implement `From<tch_scope::ScopeError>` for `{Self}`, return an error type that has it (`Box<dyn std::error::Error>`, `anyhow::Error`), or return a non-`Result` type to panic with the `ScopeError` instead"
)]
pub trait ErrorFromScope {
    fn from_scope(e: ScopeError) -> Self;
}

impl<E: From<ScopeError>> ErrorFromScope for E {
    #[inline(always)]
    fn from_scope(e: ScopeError) -> Self {
        E::from(e)
    }
}

#[cold]
#[track_caller]
pub fn panic_scope_error(e: ScopeError) -> ! {
    panic!("{e}")
}

pub use crate::SyncMode;
pub use crate::report::Site;

#[inline(always)]
pub fn timed(site: &'static Site, sync: SyncMode) -> crate::Timed {
    crate::Timed::at(site).sync(sync)
}

#[inline(always)]
pub fn sync_flag(on: bool) -> SyncMode {
    if on {
        SyncMode::Always
    } else {
        SyncMode::Never
    }
}

#[inline(always)]
pub fn memory_scope(name: &'static str) -> crate::HostMemory {
    crate::HostMemory::new(name)
}

/// Guards that record how the body ended; the macros mark a run whose
/// `Result` is `Err`.
pub trait MarkFailed {
    fn mark_failed(&mut self);
}

impl MarkFailed for crate::TimedGuard {
    #[inline(always)]
    fn mark_failed(&mut self) {
        crate::TimedGuard::mark_failed(self);
    }
}

impl MarkFailed for crate::HostMemoryGuard {
    #[inline(always)]
    fn mark_failed(&mut self) {
        crate::HostMemoryGuard::mark_failed(self);
    }
}

impl MarkFailed for crate::GpuMemoryGuard {
    #[inline(always)]
    fn mark_failed(&mut self) {
        crate::GpuMemoryGuard::mark_failed(self);
    }
}

/// `timed if cond`.
impl<G: MarkFailed> MarkFailed for Option<G> {
    #[inline(always)]
    fn mark_failed(&mut self) {
        if let Some(g) = self {
            g.mark_failed();
        }
    }
}

#[inline(always)]
pub fn mark_failed<T, E>(result: &Result<T, E>, guard: &mut impl MarkFailed) {
    if result.is_err() {
        guard.mark_failed();
    }
}

/// Runs a function's body as a closure so its `Result` can be seen: the
/// expected type fixes the closure's return type, so `?` and `return`
/// inside keep the function's meaning.
#[inline(always)]
pub fn call<R>(body: impl FnOnce() -> R) -> R {
    body()
}

#[inline(always)]
pub fn gpu_memory_scope(name: &'static str, device: usize, empty_cache: bool) -> crate::GpuMemory {
    crate::GpuMemory::new(name, device).empty_cache(empty_cache)
}
