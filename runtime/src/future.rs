//! Scopes for async code: entered on every poll, left when the poll returns.
//!
//! Holding a grad-mode guard across `.await` would leak the mode into other
//! tasks polled on the same thread, and lose it when the task moves threads.
//! Like tracing's `Instrumented`, [`Scoped`] enters around each poll instead.
//! Scopes that must cover the whole future (a timer, a seed, a checkpoint)
//! are entered once by [`Spanned`].

use std::future::Future;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::{EntryError, Scope};

mod watch;

use watch::PollWatch;
pub use watch::{Watch, watch_hidden_await};

pin_project! {
    /// A future run inside a scope, re-entered on every poll. Made by
    /// [`ScopeFutureExt::in_scope`] and by the macros for async code.
    ///
    /// Dropped mid-flight (cancelled: a `select!` that took another branch,
    /// an aborted task), the future's locals are dropped inside the scope
    /// too, as they lived — like tracing's `Instrumented`.
    ///
    /// ```
    /// use tch_scope::{NoGrad, ScopeFutureExt, is_grad_enabled};
    /// let fut = async { is_grad_enabled() }.in_scope(NoGrad);
    /// let grad_inside = futures_lite_block_on(fut); // `NoGrad` cannot fail: a plain `bool`
    /// assert!(!grad_inside);
    /// assert!(is_grad_enabled());
    /// # fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     let mut f = std::pin::pin!(f);
    /// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    /// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
    /// # }
    /// ```
    #[must_use = "futures do nothing unless polled"]
    #[project = ScopedProj]
    pub struct Scoped<S: Scope, F> {
        scope: S,
        #[pin]
        future: ManuallyDrop<F>,
        // Polled and not finished: its locals are alive.
        live: bool,
    }

    impl<S: Scope, F> PinnedDrop for Scoped<S, F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            let _guard = if *this.live { this.scope.enter().ok() } else { None };
            // SAFETY: dropped in place, once, and never touched again.
            unsafe { ManuallyDrop::drop(this.future.get_unchecked_mut()) }
        }
    }
}

impl<S: Scope, F> Scoped<S, F> {
    /// `future`, polled inside `scope`.
    pub fn new(scope: S, future: F) -> Self {
        Self {
            scope,
            future: ManuallyDrop::new(future),
            live: false,
        }
    }
}

impl<S: Scope, F> std::fmt::Debug for Scoped<S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scoped")
            .field("live", &self.live)
            .finish_non_exhaustive()
    }
}

/// The pinned inner future of a `ManuallyDrop` field.
fn inner<F>(f: Pin<&mut ManuallyDrop<F>>) -> Pin<&mut F> {
    // SAFETY: `ManuallyDrop` is a transparent wrapper; the future stays
    // where it is, and is dropped in place by the `PinnedDrop` impls.
    unsafe { f.map_unchecked_mut(|f| &mut **f) }
}

impl<S: Scope, F: Future> Future for Scoped<S, F> {
    /// The future's value where the scope cannot fail to enter (like
    /// tracing's `.instrument(span)`), else `Result<value, ScopeError>`:
    /// see [`EntryError::Output`].
    type Output = <S::Error as EntryError>::Output<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // Debug builds: no scope held across an unseen await (see `watch`).
        let watch = PollWatch::start();
        let _guard = match this.scope.enter() {
            Ok(g) => g,
            Err(e) => return Poll::Ready(S::Error::output(Err(e))),
        };
        *this.live = true;
        let out = inner(this.future).poll(cx);
        watch.returning();
        *this.live = out.is_pending();
        out.map(|v| S::Error::output(Ok(v)))
    }
}

/// The error of a [`Spanned`] future: `Infallible` only if both kinds of
/// scope are.
pub type SpannedError<P, S> = <<P as Scope>::Error as EntryError>::Or<<S as Scope>::Error>;

pin_project! {
    /// A future with two kinds of scope: `each_poll` is entered around every
    /// poll (per-thread state: grad mode, the current device), `whole_future` once,
    /// at the first poll, inside `each_poll`, and left when the future
    /// completes or is dropped (timers, seeds, checkpoints: state that must
    /// cover the whole future, like a Python `with` around an `await`).
    /// Made by [`ScopeFutureExt::in_scopes`] and by the macros.
    ///
    /// Dropped mid-flight, the future's locals are dropped inside both, and
    /// then `whole_future` is left inside `each_poll`, as it was entered.
    ///
    /// The `whole_future` guard lives in the future, so the future is `Send` only
    /// if that guard is.
    ///
    /// ```no_run
    /// use tch_scope::{NoGrad, ScopeFutureExt, Timed, is_grad_enabled};
    /// let fut = async { is_grad_enabled() }.in_scopes(NoGrad, Timed::new("doc::span"));
    /// # let mut f = std::pin::pin!(fut);
    /// # let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    /// # let out = loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { break v; } };
    /// assert_eq!(out.unwrap(), false);
    /// assert_eq!(tch_scope::report().timing("doc::span").unwrap().count, 1);
    /// ```
    #[must_use = "futures do nothing unless polled"]
    #[project = SpannedProj]
    pub struct Spanned<P: Scope, S: Scope, F> {
        each_poll: P,
        whole_future: S,
        #[pin]
        future: ManuallyDrop<F>,
        guard: Option<S::Guard>,
        started: bool,
        live: bool,
        hand_exit: bool,
    }

    impl<P: Scope, S: Scope, F> PinnedDrop for Spanned<P, S, F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            let _outer = if *this.live { this.each_poll.enter().ok() } else { None };
            if let Some(g) = this.guard.as_mut() {
                S::resume(g);
            }
            // SAFETY: dropped in place, once, and never touched again.
            unsafe { ManuallyDrop::drop(this.future.get_unchecked_mut()) }
            *this.guard = None;
        }
    }
}

impl<P: Scope, S: Scope, F> Spanned<P, S, F> {
    /// `future`, polled inside `each_poll`, with `whole_future` entered once.
    pub fn new(each_poll: P, whole_future: S, future: F) -> Self {
        Self {
            each_poll,
            whole_future,
            future: ManuallyDrop::new(future),
            guard: None,
            started: false,
            live: false,
            hand_exit: false,
        }
    }

    /// On completion, the scopes are left catching their exit errors (a
    /// checkpoint that can't be saved): the first is handed to the code
    /// that awaited this future, on the same thread, which takes it at once
    /// (the macros' expansion of a function returning `Result` does, and
    /// makes it the function's `Err`). Without it, exit errors go to the
    /// exit hook ([`set_exit_hook`](crate::set_exit_hook)).
    #[doc(hidden)]
    #[must_use = "futures do nothing unless polled"]
    pub fn exit_errors_to_caller(mut self) -> Self {
        self.hand_exit = true;
        self
    }
}

impl<P: Scope, S: Scope, F: Future> Future for Spanned<P, S, F> {
    /// The future's value, or the error of a scope that could not be entered.
    type Output = Result<F::Output, SpannedError<P, S>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let watch = PollWatch::start();
        let outer = match this.each_poll.enter() {
            Ok(g) => g,
            Err(e) => return Poll::Ready(Err(e.or::<S::Error>())),
        };
        if *this.started {
            if let Some(g) = this.guard.as_mut() {
                S::resume(g);
            }
        } else {
            *this.started = true;
            match this.whole_future.enter() {
                Ok(g) => *this.guard = Some(g),
                Err(e) => return Poll::Ready(Err(<P::Error as EntryError>::or_from(e))),
            }
        }
        *this.live = true;
        let out = inner(this.future).poll(cx);
        watch.returning();
        if out.is_pending() {
            if let Some(g) = this.guard.as_mut() {
                // Nothing of `whole_future` stays entered on this thread while
                // the future waits (tracing's rule for `Instrumented`).
                S::suspend(g);
            }
            drop(outer);
            return Poll::Pending;
        }
        *this.live = false;
        // Leave `whole_future` before the per-poll scopes, as entered.
        let whole = this.guard.take();
        if *this.hand_exit && (S::EXIT_CAN_FAIL || P::EXIT_CAN_FAIL) {
            if let Err(e) = crate::exit::catching(move || {
                drop(whole);
                drop(outer);
            }) {
                crate::exit::hand_over(e);
            }
        } else {
            drop(whole);
            drop(outer);
        }
        out.map(Ok)
    }
}

/// Runs a future inside a scope, re-entered on every poll.
///
/// ```no_run
/// use tch_scope::{InferenceMode, ScopeFutureExt};
/// let fut = async { tch_scope::is_inference_mode_enabled() }.in_scope(InferenceMode);
/// # let _ = fut;
/// ```
pub trait ScopeFutureExt: Future + Sized {
    /// Wraps `self` so that `scope` is entered around each poll.
    fn in_scope<S: Scope>(self, scope: S) -> Scoped<S, Self> {
        Scoped::new(scope, self)
    }

    /// Wraps `self` so that `each_poll` is entered around each poll and
    /// `whole_future` once, for the whole future: see [`Spanned`]. The
    /// macros' `EachPoll` and `WholeFuture` words, by hand.
    fn in_scopes<P: Scope, S: Scope>(self, each_poll: P, whole_future: S) -> Spanned<P, S, Self> {
        Spanned::new(each_poll, whole_future, self)
    }

    /// The former name of [`in_scopes`](ScopeFutureExt::in_scopes).
    #[deprecated(note = "renamed `in_scopes(each_poll, whole_future)`")]
    fn in_span<P: Scope, S: Scope>(self, each_poll: P, whole_future: S) -> Spanned<P, S, Self> {
        Spanned::new(each_poll, whole_future, self)
    }
}

impl<F: Future> ScopeFutureExt for F {}

/// An iterator whose every `next()` runs inside a scope, left before
/// `next()` returns: what `@torch.no_grad()` does on a generator
/// (token-by-token decoding, a data loader). Made by
/// [`ScopeIterExt::in_scope`].
///
/// Items are `I::Item` where the scope cannot fail to enter; otherwise
/// `Result<I::Item, ScopeError>`, and a scope that cannot be entered ends
/// the iteration with its error (see [`EntryError::Output`]).
///
/// ```
/// use tch_scope::{NoGrad, ScopeIterExt, is_grad_enabled};
/// let seen: Vec<bool> = (0..3)
///     .map(|_| is_grad_enabled())
///     .in_scope(NoGrad)
///     .collect();
/// assert_eq!(seen, [false, false, false]);
/// assert!(is_grad_enabled());
/// ```
#[derive(Debug, Clone)]
#[must_use = "iterators do nothing unless consumed"]
pub struct ScopedIter<S, I> {
    scope: S,
    iter: I,
}

impl<S: Scope, I: Iterator> Iterator for ScopedIter<S, I> {
    type Item = <S::Error as EntryError>::Output<I::Item>;

    fn next(&mut self) -> Option<Self::Item> {
        let _guard = match self.scope.enter() {
            Ok(g) => g,
            Err(e) => return Some(S::Error::output(Err(e))),
        };
        self.iter.next().map(|v| S::Error::output(Ok(v)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.iter.size_hint()
    }
}

/// Runs every `next()` of an iterator inside a scope: the twin of
/// [`ScopeFutureExt::in_scope`] for iterators.
pub trait ScopeIterExt: Iterator + Sized {
    /// Wraps `self` so that `scope` is entered around each `next()`.
    ///
    /// ```no_run
    /// use tch_scope::{InferenceMode, ScopeIterExt};
    /// let mut it = std::iter::repeat_with(tch_scope::is_inference_mode_enabled).in_scope(InferenceMode);
    /// assert_eq!(it.next(), Some(true));
    /// assert!(!tch_scope::is_inference_mode_enabled());
    /// ```
    fn in_scope<S: Scope>(self, scope: S) -> ScopedIter<S, Self> {
        ScopedIter { scope, iter: self }
    }
}

impl<I: Iterator> ScopeIterExt for I {}

#[cfg(test)]
mod tests {
    use super::ScopeIterExt;
    use crate::{InferenceMode, is_inference_mode_enabled};

    #[test]
    fn an_iterator_in_a_scope() {
        let mut it = std::iter::repeat_with(is_inference_mode_enabled).in_scope(InferenceMode);
        assert_eq!(it.next(), Some(true));
        assert!(!is_inference_mode_enabled());
    }
}
