//! A `tracing` span owned by a guard that may outlive one poll.
//!
//! `tracing::span::EnteredSpan` is `!Send` and stays entered until dropped:
//! held by a `timed` guard across an `.await`, it made every task polled on
//! that thread meanwhile log inside `timed{…}`, and the future `!Send`.
//! [`TracingSpan`] holds the plain (`Send`) span and enters or exits it
//! through its subscriber, so the async adapters can step out of it when a
//! poll suspends ([`Scope::suspend`](crate::Scope::suspend)) and back in on
//! the next poll, on whichever thread runs it.

/// A span entered at creation and exited on drop, or in between by
/// `suspend`/`resume`.
#[derive(Debug)]
pub(crate) struct TracingSpan {
    span: tracing::Span,
    entered: bool,
}

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

impl Drop for TracingSpan {
    fn drop(&mut self) {
        self.suspend();
    }
}
