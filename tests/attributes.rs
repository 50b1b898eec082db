//! Attributes keep the function as written: visibility, generics, where
//! clauses, receivers, `impl Trait`, `unsafe fn`, trait methods, docs and
//! other attributes; errors propagate through `Result` or panic.

use std::fmt::Debug;

use tch::Device;
use tch_scope::{ScopeError, device, enable_grad, grad, inference_mode, no_grad, scope, with};

use crate::util::{fresh, state};

#[no_grad]
fn plain() -> bool {
    tch_scope::is_grad_enabled()
}

/// Doc comments and other attributes stay.
#[no_grad]
#[inline]
#[must_use]
pub(crate) fn generic<T>(x: &T) -> (T, bool)
where
    T: Clone + Debug + PartialEq,
{
    (x.clone(), tch_scope::is_grad_enabled())
}

#[inference_mode]
fn returns_impl_trait() -> impl Iterator<Item = bool> {
    [tch_scope::is_inference_mode_enabled()].into_iter()
}

#[grad(flag)]
fn with_flag(flag: bool) -> bool {
    tch_scope::is_grad_enabled()
}

#[no_grad]
unsafe fn raw(p: *const i32) -> (i32, bool) {
    // SAFETY: the caller passes a valid pointer.
    (unsafe { *p }, tch_scope::is_grad_enabled())
}

#[scope(no_grad, device(cpu))]
#[track_caller]
fn listed() -> (bool, Device, u32) {
    (
        tch_scope::is_grad_enabled(),
        tch_scope::current_device(),
        std::panic::Location::caller().line(),
    )
}

struct Model {
    calls: u32,
}

impl Model {
    #[no_grad]
    fn forward(&mut self) -> bool {
        self.calls += 1;
        tch_scope::is_grad_enabled()
    }

    #[enable_grad]
    fn by_value(self) -> (u32, bool) {
        (self.calls, tch_scope::is_grad_enabled())
    }
}

trait Predict {
    #[inference_mode]
    fn predict(&self) -> bool {
        tch_scope::is_inference_mode_enabled()
    }
}
impl Predict for Model {}

#[test]
fn attributes_keep_the_function_and_restore() {
    assert!(!plain());
    assert_eq!(generic(&3), (3, false));
    assert_eq!(returns_impl_trait().collect::<Vec<_>>(), [true]);
    assert!(with_flag(true));
    assert!(!with_flag(false));
    let v = 5;
    // SAFETY: `&v` is valid.
    assert_eq!(unsafe { raw(&v) }, (5, false));
    let line = line!() + 1;
    let (g, d, caller_line) = listed();
    assert_eq!((g, d), (false, Device::Cpu));
    assert_eq!(caller_line, line, "#[track_caller] survives");
    let mut m = Model { calls: 0 };
    assert!(!m.forward());
    assert!(m.predict());
    assert_eq!(m.by_value(), (1, true));
    assert_eq!(state(), fresh());
}

#[derive(Debug)]
enum AppError {
    Scope(ScopeError),
}
impl From<ScopeError> for AppError {
    fn from(e: ScopeError) -> Self {
        AppError::Scope(e)
    }
}

#[device(n)]
fn on_cuda_result(n: usize) -> Result<Device, AppError> {
    Ok(tch_scope::current_device())
}

#[device(n)]
fn on_cuda_plain(n: usize) -> Device {
    tch_scope::current_device()
}

#[test]
fn entry_errors_propagate_through_result_or_panic() {
    let missing = tch_scope::cuda_device_count();
    match on_cuda_result(missing) {
        Err(AppError::Scope(e)) => assert_eq!(e.device(), Some(Device::Cuda(missing))),
        other => panic!("expected a scope error, got {other:?}"),
    }
    let r = std::panic::catch_unwind(|| on_cuda_plain(missing));
    let msg = r.unwrap_err().downcast::<String>().unwrap();
    assert!(msg.contains(&format!("cuda:{missing}")), "{msg}");
    assert_eq!(state(), fresh());
}

/// A user-defined scope: counts entries and exits.
struct Counter<'a>(&'a std::cell::Cell<(u32, u32)>);
struct CounterGuard<'a>(&'a std::cell::Cell<(u32, u32)>);
impl<'a> tch_scope::Scope for Counter<'a> {
    type Guard = CounterGuard<'a>;
    type Error = ScopeError;
    fn enter(&mut self) -> Result<CounterGuard<'a>, ScopeError> {
        let (i, o) = self.0.get();
        self.0.set((i + 1, o));
        Ok(CounterGuard(self.0))
    }
}
impl Drop for CounterGuard<'_> {
    fn drop(&mut self) {
        let (i, o) = self.0.get();
        self.0.set((i, o + 1));
    }
}

#[with(Counter(c))]
fn counted(c: &std::cell::Cell<(u32, u32)>) -> (u32, u32) {
    c.get()
}

#[test]
fn user_scopes_through_with() {
    let c = std::cell::Cell::new((0, 0));
    assert_eq!(counted(&c), (1, 0));
    assert_eq!(c.get(), (1, 1));
    let inside = tch_scope::scoped!(with(Counter(&c)), no_grad, with(Counter(&c)) => c.get());
    assert_eq!(inside, (3, 1));
    assert_eq!(c.get(), (3, 3));
}
