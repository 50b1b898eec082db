//! Scopes for async code: entered on every poll, left when the poll returns.
//!
//! Holding a grad-mode guard across `.await` would leak the mode into other
//! tasks polled on the same thread, and lose it when the task moves threads.
//! Like tracing's `Instrumented`, [`Scoped`] enters around each poll instead.
//! Scopes that must cover the whole future (a timer, a seed, a checkpoint)
//! are entered once by [`Spanned`].

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::{Scope, ScopeError};

pin_project! {
    /// A future run inside a scope, re-entered on every poll. Made by
    /// [`ScopeFutureExt::in_scope`] and by the macros for async code.
    ///
    /// ```
    /// use tch_scope::{NoGrad, ScopeFutureExt, is_grad_enabled};
    /// let fut = async { is_grad_enabled() }.in_scope(NoGrad);
    /// let grad_inside = futures_lite_block_on(fut).unwrap();
    /// assert!(!grad_inside);
    /// assert!(is_grad_enabled());
    /// # fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     let mut f = std::pin::pin!(f);
    /// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    /// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
    /// # }
    /// ```
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct Scoped<S, F> {
        scope: S,
        #[pin]
        future: F,
    }
}

impl<S, F> Scoped<S, F> {
    /// `future`, polled inside `scope`.
    ///
    /// ```
    /// let _ = tch_scope::Scoped::new(tch_scope::NoGrad, async {});
    /// ```
    pub fn new(scope: S, future: F) -> Self {
        Self { scope, future }
    }
}

impl<S: Scope, F: Future> Future for Scoped<S, F> {
    type Output = Result<F::Output, ScopeError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let _guard = match this.scope.enter() {
            Ok(g) => g,
            Err(e) => return Poll::Ready(Err(e)),
        };
        this.future.poll(cx).map(Ok)
    }
}

pin_project! {
    /// A future with two kinds of scope: `per_poll` is entered around every
    /// poll (per-thread state: grad mode, the current device), `span` once,
    /// at the first poll, inside `per_poll`, and left when the future
    /// completes or is dropped (timers, seeds, checkpoints: state that must
    /// cover the whole future, like a Python `with` around an `await`). Made by [`ScopeFutureExt::in_span`] and by the macros.
    ///
    /// The span's guard lives in the future, so the future is `Send` only
    /// if that guard is.
    ///
    /// ```
    /// use tch_scope::{NoGrad, ScopeFutureExt, Timed, is_grad_enabled};
    /// let fut = async { is_grad_enabled() }.in_span(NoGrad, Timed::new("doc::span"));
    /// # let mut f = std::pin::pin!(fut);
    /// # let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    /// # let out = loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { break v; } };
    /// assert_eq!(out.unwrap(), false);
    /// assert_eq!(tch_scope::report().timing("doc::span").unwrap().count, 1);
    /// ```
    #[must_use = "futures do nothing unless polled"]
    #[project = SpannedProj]
    pub struct Spanned<P: Scope, S: Scope, F> {
        per_poll: P,
        span: S,
        // Declared before `guard`: a dropped future's locals go first.
        #[pin]
        future: F,
        guard: Option<S::Guard>,
        started: bool,
    }

    impl<P: Scope, S: Scope, F> PinnedDrop for Spanned<P, S, F> {
        fn drop(this: Pin<&mut Self>) {
            // Cancelled mid-flight: leave the span inside `per_poll`, as it
            // was entered (a timer syncs the scope's device, say).
            let this = this.project();
            if this.guard.is_some() {
                let _outer = this.per_poll.enter().ok();
                *this.guard = None;
            }
        }
    }
}

impl<P: Scope, S: Scope, F> Spanned<P, S, F> {
    /// `future`, polled inside `per_poll`, with `span` entered once.
    ///
    /// ```
    /// let _ = tch_scope::Spanned::new(tch_scope::End, tch_scope::End, async {});
    /// ```
    pub fn new(per_poll: P, span: S, future: F) -> Self {
        Self {
            per_poll,
            span,
            future,
            guard: None,
            started: false,
        }
    }
}

impl<P: Scope, S: Scope, F: Future> Future for Spanned<P, S, F> {
    type Output = Result<F::Output, ScopeError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let outer = match this.per_poll.enter() {
            Ok(g) => g,
            Err(e) => return Poll::Ready(Err(e)),
        };
        if !*this.started {
            *this.started = true;
            match this.span.enter() {
                Ok(g) => *this.guard = Some(g),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        let out = this.future.poll(cx);
        if out.is_ready() {
            // Leave the span before the per-poll scopes, as entered.
            *this.guard = None;
        }
        drop(outer);
        out.map(Ok)
    }
}

/// Runs a future inside a scope, re-entered on every poll.
///
/// ```
/// use tch_scope::{InferenceMode, ScopeFutureExt};
/// let fut = async { tch_scope::is_inference_mode_enabled() }.in_scope(InferenceMode);
/// # let _ = fut;
/// ```
pub trait ScopeFutureExt: Future + Sized {
    /// Wraps `self` so that `scope` is entered around each poll.
    fn in_scope<S: Scope>(self, scope: S) -> Scoped<S, Self> {
        Scoped::new(scope, self)
    }

    /// Wraps `self` so that `per_poll` is entered around each poll and
    /// `span` once, for the whole future: see [`Spanned`].
    fn in_span<P: Scope, S: Scope>(self, per_poll: P, span: S) -> Spanned<P, S, Self> {
        Spanned::new(per_poll, span, self)
    }
}

impl<F: Future> ScopeFutureExt for F {}
