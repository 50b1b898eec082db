//! A `tracing` span owned by a guard that may outlive one poll.
//!
//! `tracing::span::EnteredSpan` is `!Send` and stays entered until dropped:
//! held by a `timed` guard across an `.await`, it made every task polled on
//! that thread meanwhile log inside `timed{…}`, and the future `!Send`.
//! [`TracingSpan`] holds the plain (`Send`) span and enters or exits it
//! through its subscriber, so the async adapters can step out of it when a
//! poll suspends ([`Scope::suspend`](crate::Scope::suspend)) and back in on
//! the next poll, on whichever thread runs it.

/// A guard's `tracing` span, if any: with the `tracing` feature a
/// [`TracingSpan`] (none while measuring is switched off), without it
/// nothing at all (zero-sized), so guards hold one field and call
/// `suspend`/`resume` without a `cfg` of their own.
#[derive(Debug, Default)]
pub(crate) struct GuardSpan {
    #[cfg(feature = "tracing")]
    span: Option<TracingSpan>,
}

impl GuardSpan {
    /// No span.
    pub(crate) const NONE: GuardSpan = GuardSpan {
        #[cfg(feature = "tracing")]
        span: None,
    };

    /// `span`, entered on this thread.
    #[cfg(feature = "tracing")]
    pub(crate) fn entered(span: tracing::Span) -> Self {
        GuardSpan {
            span: Some(TracingSpan::entered(span)),
        }
    }

    /// Exits the span, if any (a poll that suspended).
    #[inline(always)]
    pub(crate) fn suspend(&mut self) {
        #[cfg(feature = "tracing")]
        if let Some(s) = &mut self.span {
            s.suspend();
        }
    }

    /// Enters it again on this thread (the next poll).
    #[inline(always)]
    pub(crate) fn resume(&mut self) {
        #[cfg(feature = "tracing")]
        if let Some(s) = &mut self.span {
            s.resume();
        }
    }
}

/// `guard_span!(target: "tch_scope", "timed", name = n)`: a [`GuardSpan`]
/// entered now with the `tracing` feature, [`GuardSpan::NONE`] without it
/// (the arguments are then not evaluated).
macro_rules! guard_span {
    ($($span:tt)*) => {{
        #[cfg(feature = "tracing")]
        let span = $crate::tracing_span::GuardSpan::entered(tracing::info_span!($($span)*));
        #[cfg(not(feature = "tracing"))]
        let span = $crate::tracing_span::GuardSpan::NONE;
        span
    }};
}
pub(crate) use guard_span;

/// A span entered at creation and exited on drop, or in between by
/// `suspend`/`resume`.
#[cfg(feature = "tracing")]
#[derive(Debug)]
pub(crate) struct TracingSpan {
    span: tracing::Span,
    entered: bool,
}

#[cfg(feature = "tracing")]
impl TracingSpan {
    /// Enters `span` on this thread.
    pub(crate) fn entered(span: tracing::Span) -> Self {
        let mut s = Self {
            span,
            entered: false,
        };
        s.resume();
        s
    }

    /// Exits the span on this thread (a poll that suspended).
    pub(crate) fn suspend(&mut self) {
        if self.entered {
            self.entered = false;
            self.span
                .with_subscriber(|(id, dispatch)| dispatch.exit(id));
        }
    }

    /// Enters the span again on this thread (the next poll).
    pub(crate) fn resume(&mut self) {
        if !self.entered {
            self.entered = true;
            self.span
                .with_subscriber(|(id, dispatch)| dispatch.enter(id));
        }
    }
}

#[cfg(feature = "tracing")]
impl Drop for TracingSpan {
    fn drop(&mut self) {
        self.suspend();
    }
}
