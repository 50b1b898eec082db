//! What the macros expand to. Not a public API: names and signatures here
//! change without notice.

pub use tch_scope_macros::{scoped_impl, try_scoped_impl};

mod method_name;
mod task;
mod words;

pub use method_name::{MethodName, MethodSite};
pub use task::{MovesWithTask, Task, TaskGuard};
pub use words::*;

/// Test-only: makes the shim's `op` fail `times` times on this thread (see
/// `ffi::inject_fault`); the fault-injection tests in `tests/faults.rs`.
pub use crate::ffi::inject_fault;
/// Test-only: a stop listener without a checkpoint (`tests/stop.rs`).
pub use crate::stop::testing as stop;

/// `scoped!` bodies that may hide an `.await` in a macro (debug check).
pub use crate::future::{Watch, watch_hidden_await};
pub use crate::{Chain, End, EntryError, Outcome, Scope, ScopeError, Scoped, Spanned};

use crate::{DeadlineGuard, When};
use std::convert::Infallible;
use std::marker::PhantomData;

#[inline(always)]
pub fn when<S: Scope>(on: bool, scope: S) -> When<S> {
    When::new(on, scope)
}

#[inline(always)]
pub fn enter<S: Scope>(mut scope: S) -> Result<Exit<S>, S::Error> {
    scope.enter().map(Exit::new)
}

/// `try_scoped!`: every error as a `ScopeError`.
#[inline(always)]
pub fn try_enter<S: Scope>(mut scope: S) -> Result<Exit<S>, ScopeError> {
    scope
        .enter()
        .map(Exit::new)
        .map_err(EntryError::into_scope_error)
}

/// A future's `Result` with the error as a `ScopeError` (`try_scoped!`).
#[inline(always)]
pub fn scope_result<T, E: EntryError>(r: Result<T, E>) -> Result<T, ScopeError> {
    r.map_err(EntryError::into_scope_error)
}

// `inline`, not `inline(always)`: LLVM honours `always` even in debug
// builds, and this body copied into every scope made a crate of 500 scoped
// functions compile 1.4x slower than the same guards by hand
// (scripts/bench/compile_cost.py). Release builds inline it anyway.
#[inline]
#[track_caller]
pub fn enter_or_panic<S: Scope>(mut scope: S) -> Exit<S> {
    match scope.enter() {
        Ok(g) => Exit::new(g),
        Err(e) => panic_scope_error(e),
    }
}

#[cold]
#[track_caller]
pub fn panic_scope_error<E: EntryError>(e: E) -> ! {
    panic!("{}", e.into_scope_error())
}

/// How a scoped function returning `R` leaves when a scope's entry failed
/// with an `E`. Three traits, tried by autoref in this order:
/// [`LeaveInfallible`] (`E` is `Infallible`: never called, no bound on `R`),
/// [`LeaveWithErr`] (`R` is `Result<_, X>` with `X: From<ScopeError>`:
/// returns `Err`), [`LeavePanicking`] (anything else: panics with the
/// message). A generic `X` without a `From<ScopeError>` bound in scope
/// takes the panicking path.
pub struct Leave<R, E>(PhantomData<fn() -> (R, E)>);

impl<R, E> Leave<R, E> {
    /// Infers `E` from the error at hand; `R` is written by the expansion.
    #[inline(always)]
    pub fn of(_: &E) -> Self {
        Leave(PhantomData)
    }
}

pub trait LeaveInfallible<R> {
    fn leave(self, e: Infallible) -> R;
}

impl<R> LeaveInfallible<R> for &&&Leave<R, Infallible> {
    #[inline(always)]
    fn leave(self, e: Infallible) -> R {
        match e {}
    }
}

pub trait LeaveWithErr<R> {
    fn leave(self, e: ScopeError) -> R;
}

impl<T, X: From<ScopeError>> LeaveWithErr<Result<T, X>> for &&Leave<Result<T, X>, ScopeError> {
    #[inline(always)]
    fn leave(self, e: ScopeError) -> Result<T, X> {
        Err(X::from(e))
    }
}

pub trait LeavePanicking<R> {
    fn leave(self, e: ScopeError) -> R;
}

impl<R> LeavePanicking<R> for &Leave<R, ScopeError> {
    #[track_caller]
    fn leave(self, e: ScopeError) -> R {
        panic_scope_error(e)
    }
}

/// An entered scope with what the expansion saw of its body: `S::exit`
/// hears the outcome just before the guard drops (`Panicked` while
/// unwinding; `Completed` unless the expansion marked it `Failed`).
pub struct Exit<S: Scope> {
    guard: S::Guard,
    seen: Outcome,
    _scope: PhantomData<fn() -> S>,
}

impl<S: Scope> Exit<S> {
    #[inline(always)]
    fn new(guard: S::Guard) -> Self {
        Exit {
            guard,
            seen: Outcome::Completed,
            _scope: PhantomData,
        }
    }

    /// What the body's value says.
    #[inline(always)]
    pub fn saw(&mut self, outcome: Outcome) {
        self.seen = outcome;
    }

    /// Leaves the scope on a success path: an exit error reported while
    /// leaving (a checkpoint that can't be saved, a user scope's
    /// `ExitError::report`) comes back instead of going to the hook.
    ///
    /// # Errors
    /// The first exit error reported while leaving, as a `ScopeError`.
    #[inline]
    pub fn finish(self) -> Result<(), ScopeError> {
        if !S::EXIT_CAN_FAIL {
            drop(self);
            return Ok(());
        }
        crate::exit::catching(move || drop(self)).map_err(ScopeError::from)
    }
}

/// A scoped function returning `Result`: leaves `guard` after the body's
/// value (whose outcome its [`Exit::saw`] holds) and the inner scopes'
/// exits (`inner`). After a completed body and clean inner exits it leaves
/// through [`Exit::finish`], so its exit error comes back; otherwise it
/// just drops (hearing `Failed` if an inner exit failed), and the hook
/// hears any exit error of its own: the first error wins.
///
/// # Errors
/// `inner`'s error, or the first exit error reported while leaving.
#[inline]
pub fn finish_after<S: Scope>(
    mut guard: Exit<S>,
    inner: Result<(), ScopeError>,
) -> Result<(), ScopeError> {
    if inner.is_err() {
        guard.saw(Outcome::Failed);
    } else if guard.seen == Outcome::Completed {
        return guard.finish();
    }
    drop(guard);
    inner
}

/// After a [`Spanned`] future made with
/// [`exit_errors_to_caller`](Spanned::exit_errors_to_caller) completes with
/// `outcome`: the exit error it handed over on this thread, if the body
/// completed; after a failed body the hook hears it (the body's `Err`
/// wins).
#[inline]
pub fn exit_error_after(outcome: Outcome) -> Option<ScopeError> {
    let e = crate::exit::take_handed()?;
    if outcome == Outcome::Completed {
        Some(ScopeError::from(e))
    } else {
        crate::exit::to_hook(&e);
        None
    }
}

/// `try_scoped!`: leaves `guard` after its body's value `r`; an `Ok` whose
/// scope can't be left cleanly becomes that `Err`.
#[inline]
pub fn finish<S: Scope, T>(guard: Exit<S>, r: Result<T, ScopeError>) -> Result<T, ScopeError> {
    match r {
        Ok(v) => guard.finish().map(|()| v),
        Err(e) => {
            drop(guard);
            Err(e)
        }
    }
}

/// `scoped!`: leaves `guard` after its body; an exit error is a panic.
#[inline]
#[track_caller]
pub fn finish_or_panic<S: Scope>(guard: Exit<S>) {
    if let Err(e) = guard.finish() {
        panic!("{e}")
    }
}

impl<S: Scope> Drop for Exit<S> {
    #[inline(always)]
    fn drop(&mut self) {
        S::exit(&mut self.guard, Outcome::at_exit_or(self.seen));
    }
}

/// The outcome of a body's value, by autoref: `Failed` for an `Err`,
/// `Completed` for any other value: `(&Seen(&v)).outcome()`.
pub struct Seen<'a, T>(pub &'a T);

pub trait SeenResult {
    fn outcome(&self) -> Outcome;
}

impl<T, E> SeenResult for Seen<'_, Result<T, E>> {
    #[inline(always)]
    fn outcome(&self) -> Outcome {
        Outcome::of(self.0)
    }
}

pub trait SeenAny {
    fn outcome(&self) -> Outcome;
}

impl<T> SeenAny for &Seen<'_, T> {
    #[inline(always)]
    fn outcome(&self) -> Outcome {
        Outcome::Completed
    }
}

/// The guard of a `deadline` word (`deadline(d) if c` too).
pub trait Tripwire {
    fn deadline(&self) -> Option<&DeadlineGuard>;
}

impl Tripwire for DeadlineGuard {
    #[inline(always)]
    fn deadline(&self) -> Option<&DeadlineGuard> {
        Some(self)
    }
}

impl<G: Tripwire> Tripwire for Option<G> {
    #[inline(always)]
    fn deadline(&self) -> Option<&DeadlineGuard> {
        self.as_ref().and_then(Tripwire::deadline)
    }
}

impl<S: Scope> Tripwire for Exit<S>
where
    S::Guard: Tripwire,
{
    #[inline(always)]
    fn deadline(&self) -> Option<&DeadlineGuard> {
        self.guard.deadline()
    }
}

/// Runs the body of a list with `deadline` (see `DeadlineGuard::run`).
#[inline]
pub fn catching<T>(guard: &impl Tripwire, body: impl FnOnce() -> T) -> Result<T, ScopeError> {
    match guard.deadline() {
        Some(g) => g.run(body),
        None => Ok(body()),
    }
}

/// Runs a function's body as a closure so its `Result` can be seen: the
/// expected type fixes the closure's return type, so `?` and `return`
/// inside keep the function's meaning.
#[inline(always)]
pub fn call<R>(body: impl FnOnce() -> R) -> R {
    body()
}
