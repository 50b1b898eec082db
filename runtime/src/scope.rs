//! The [`Scope`] trait and the combinators the macros build on.

use std::convert::Infallible;

use crate::{EntryError, Outcome};

/// Something that can be entered, giving a guard that restores the previous
/// state when dropped: the Rust counterpart of a Python context manager.
///
/// Every scope word (`no_grad`, `device(0)`, …) is a `Scope`; implement it
/// for your own types and use them with `with(…)` in
/// [`scoped!`](crate::scoped) or `#[with(…)]`. `enter` takes `&mut self` so
/// that an async scope can enter the same value again on every poll.
///
/// `Error` is [`Infallible`] for a scope whose entry cannot fail, and
/// [`ScopeError`](crate::ScopeError) otherwise: attributes of infallible
/// scopes then put no bound on the function's return type.
///
/// Guards should be `!Send` when the state they restore is per thread (grad
/// mode, the current device): a guard dropped on another thread would
/// restore the wrong thread.
///
/// ```
/// use std::cell::Cell;
/// use std::convert::Infallible;
/// use tch_scope::{Scope, scoped};
///
/// thread_local!(static DEPTH: Cell<u32> = const { Cell::new(0) });
///
/// struct Depth;
/// struct DepthGuard;
/// impl Scope for Depth {
///     type Guard = DepthGuard;
///     type Error = Infallible; // entering cannot fail
///     fn enter(&mut self) -> Result<DepthGuard, Infallible> {
///         DEPTH.with(|d| d.set(d.get() + 1));
///         Ok(DepthGuard)
///     }
/// }
/// impl Drop for DepthGuard {
///     fn drop(&mut self) {
///         DEPTH.with(|d| d.set(d.get() - 1));
///     }
/// }
///
/// let inside = scoped!(with(Depth), with(Depth) => DEPTH.with(Cell::get));
/// assert_eq!(inside, 2);
/// assert_eq!(DEPTH.with(Cell::get), 0);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a scope: it does not implement `tch_scope::Scope`",
    label = "`with(…)` needs a value that implements `tch_scope::Scope`",
    note = "implement `tch_scope::Scope` for `{Self}` (an `enter` returning a guard that restores the state on drop), or use a built-in word such as `no_grad` or `device(0)`"
)]
pub trait Scope {
    /// Restores the state on drop.
    type Guard;

    /// [`Infallible`] or [`ScopeError`](crate::ScopeError): see [`EntryError`].
    type Error: EntryError;

    /// Enters the scope.
    ///
    /// # Errors
    /// A [`ScopeError`](crate::ScopeError) naming the scope, the device and
    /// the reason when the scope cannot be entered (e.g. `device(3)` on a
    /// machine with one GPU).
    fn enter(&mut self) -> Result<Self::Guard, Self::Error>;

    /// Hears how the body ended, once, just before `guard` drops: Python's
    /// `__exit__(exc_type, exc, tb)`. The default does nothing, so a scope
    /// that only restores state in its guard's `Drop` need not write it.
    /// [`Outcome`] says on which paths each outcome is known; in async code
    /// (scopes entered around each poll) it is not called.
    ///
    /// ```
    /// use std::cell::Cell;
    /// use std::convert::Infallible;
    /// use tch_scope::{Outcome, Scope, with};
    ///
    /// thread_local!(static LAST: Cell<Option<Outcome>> = const { Cell::new(None) });
    ///
    /// /// Remembers how the last run ended (a checkpoint would mark itself
    /// /// incomplete on anything but `Completed`).
    /// struct Run;
    /// impl Scope for Run {
    ///     type Guard = ();
    ///     type Error = Infallible;
    ///     fn enter(&mut self) -> Result<(), Infallible> { Ok(()) }
    ///     fn exit(_: &mut (), outcome: Outcome) { LAST.with(|l| l.set(Some(outcome))) }
    /// }
    ///
    /// #[with(Run)]
    /// fn parse(s: &str) -> Result<u8, std::num::ParseIntError> {
    ///     Ok(s.parse::<u8>()? + 1)
    /// }
    /// assert!(parse("x").is_err());
    /// assert_eq!(LAST.with(Cell::get), Some(Outcome::Failed));
    /// assert_eq!(parse("1"), Ok(2));
    /// assert_eq!(LAST.with(Cell::get), Some(Outcome::Completed));
    /// ```
    #[inline(always)]
    fn exit(guard: &mut Self::Guard, outcome: Outcome) {
        let _ = (guard, outcome);
    }

    /// Whether leaving this scope can report an exit error
    /// ([`ExitError::report`](crate::ExitError::report), or a built-in
    /// guard's failed restore), which the success path of
    /// [`try_scoped!`](crate::try_scoped) then checks for. `true` unless a
    /// scope says otherwise; `false` only where the exit cannot fail (grad
    /// and inference mode), which spares the check.
    const EXIT_CAN_FAIL: bool = true;

    /// Called when the future holding `guard` for its whole life (a
    /// [`Spanned`](crate::Spanned) future: `timed`, the memory scopes, a
    /// `with(…)`) returns from a poll that suspended: the guard steps out
    /// of anything entered on the polling thread (a `tracing` span) so
    /// other tasks polled on that thread meanwhile are not inside it, as
    /// `tracing::Instrumented` does. The default does nothing.
    #[inline(always)]
    fn suspend(guard: &mut Self::Guard) {
        let _ = guard;
    }

    /// Called before the next poll of the future that suspended `guard`,
    /// on whichever thread polls it: re-enters what [`Scope::suspend`]
    /// left. The default does nothing.
    #[inline(always)]
    fn resume(guard: &mut Self::Guard) {
        let _ = guard;
    }
}

impl<S: Scope + ?Sized> Scope for &mut S {
    type Guard = S::Guard;
    type Error = S::Error;
    const EXIT_CAN_FAIL: bool = S::EXIT_CAN_FAIL;

    #[inline]
    fn enter(&mut self) -> Result<S::Guard, S::Error> {
        (**self).enter()
    }

    #[inline(always)]
    fn exit(guard: &mut S::Guard, outcome: Outcome) {
        S::exit(guard, outcome);
    }

    #[inline(always)]
    fn suspend(guard: &mut S::Guard) {
        S::suspend(guard);
    }

    #[inline(always)]
    fn resume(guard: &mut S::Guard) {
        S::resume(guard);
    }
}

/// Two scopes as one: enters `A` then `B`, leaves `B` then `A`.
///
/// ```no_run
/// use tch_scope::{Chain, EnableGrad, End, NoGrad, Scope};
/// let g = Chain(NoGrad, Chain(EnableGrad, End)).enter().unwrap();
/// assert!(tch_scope::is_grad_enabled()); // the inner one wins
/// drop(g);
/// assert!(tch_scope::is_grad_enabled());
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Chain<A, B>(pub A, pub B);

/// The guard of a [`Chain`]: drops the inner guard first.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
#[allow(dead_code, reason = "held only for their Drop")]
pub struct ChainGuard<A, B> {
    // Fields drop in declaration order: `inner` (B) before `outer` (A).
    inner: B,
    outer: A,
}

impl<A: Scope, B: Scope> Scope for Chain<A, B> {
    type Guard = ChainGuard<A::Guard, B::Guard>;
    type Error = <A::Error as EntryError>::Or<B::Error>;
    const EXIT_CAN_FAIL: bool = A::EXIT_CAN_FAIL || B::EXIT_CAN_FAIL;

    #[inline]
    fn enter(&mut self) -> Result<Self::Guard, Self::Error> {
        let outer = self.0.enter().map_err(EntryError::or::<B::Error>)?;
        // If B fails, `outer` drops here and A is left again.
        let inner = self.1.enter().map_err(<A::Error as EntryError>::or_from)?;
        Ok(ChainGuard { inner, outer })
    }

    #[inline(always)]
    fn exit(guard: &mut Self::Guard, outcome: Outcome) {
        B::exit(&mut guard.inner, outcome);
        A::exit(&mut guard.outer, outcome);
    }

    #[inline(always)]
    fn suspend(guard: &mut Self::Guard) {
        B::suspend(&mut guard.inner);
        A::suspend(&mut guard.outer);
    }

    #[inline(always)]
    fn resume(guard: &mut Self::Guard) {
        A::resume(&mut guard.outer);
        B::resume(&mut guard.inner);
    }
}

/// The empty scope, which ends a [`Chain`].
#[derive(Debug, Clone, Copy, Default)]
pub struct End;

impl Scope for End {
    type Guard = ();
    type Error = Infallible;
    const EXIT_CAN_FAIL: bool = false;

    #[inline]
    fn enter(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}

/// A scope entered only when a condition holds (`no_grad if cond`), like
/// `ExitStack.enter_context` behind an `if`.
///
/// ```no_run
/// use tch_scope::{NoGrad, Scope, When};
/// let g = When::new(false, NoGrad).enter().unwrap();
/// assert!(g.is_none());
/// assert!(tch_scope::is_grad_enabled());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct When<S> {
    on: bool,
    scope: S,
}

impl<S> When<S> {
    /// `scope`, entered only if `on`.
    pub fn new(on: bool, scope: S) -> Self {
        Self { on, scope }
    }
}

impl<S: Scope> Scope for When<S> {
    type Guard = Option<S::Guard>;
    type Error = S::Error;
    const EXIT_CAN_FAIL: bool = S::EXIT_CAN_FAIL;

    #[inline]
    fn enter(&mut self) -> Result<Self::Guard, S::Error> {
        if self.on {
            self.scope.enter().map(Some)
        } else {
            Ok(None)
        }
    }

    #[inline(always)]
    fn exit(guard: &mut Self::Guard, outcome: Outcome) {
        if let Some(g) = guard {
            S::exit(g, outcome);
        }
    }

    #[inline(always)]
    fn suspend(guard: &mut Self::Guard) {
        if let Some(g) = guard {
            S::suspend(g);
        }
    }

    #[inline(always)]
    fn resume(guard: &mut Self::Guard) {
        if let Some(g) = guard {
            S::resume(g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Chain, End, Scope, When};
    use crate::{EnableGrad, NoGrad, is_grad_enabled};

    #[test]
    fn a_chain_enters_in_order_and_leaves_in_reverse() {
        let g = Chain(NoGrad, Chain(EnableGrad, End)).enter().unwrap();
        assert!(is_grad_enabled()); // the inner one wins
        drop(g);
        assert!(is_grad_enabled());
        let g = Chain(EnableGrad, Chain(NoGrad, End)).enter().unwrap();
        assert!(!is_grad_enabled());
        drop(g);
        assert!(is_grad_enabled());
    }

    #[test]
    fn when_enters_only_if_on() {
        let g = When::new(false, NoGrad).enter().unwrap();
        assert!(g.is_none());
        assert!(is_grad_enabled());
        let g = When::new(true, NoGrad).enter().unwrap();
        assert!(g.is_some() && !is_grad_enabled());
        drop(g);
        assert!(is_grad_enabled());
    }
}
