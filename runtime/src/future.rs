//! Scopes for async code: entered on every poll, left when the poll returns.
//!
//! Holding a grad-mode guard across `.await` would leak the mode into other
//! tasks polled on the same thread, and lose it when the task moves threads.
//! Like tracing's `Instrumented`, [`Scoped`] enters around each poll instead.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::{Scope, ScopeError};

pin_project_lite::pin_project! {
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
}

impl<F: Future> ScopeFutureExt for F {}
