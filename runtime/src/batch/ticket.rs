//! [`Ticket`]: one request's answer, waited for by blocking or awaited,
//! on a one-shot slot built on `std` (no async runtime needed).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};

use tch::Tensor;

use super::BatchError;

/// What a request is answered with: its outputs, or why it has none.
pub(crate) type Answer = Result<Vec<Tensor>, BatchError>;

/// Shared by a [`Ticket`] and its request in the queue.
#[derive(Default)]
pub(crate) struct Slot {
    state: Mutex<State>,
    ready: Condvar,
    /// Set when the ticket is dropped: nobody will read the answer.
    gone: AtomicBool,
}

#[derive(Default)]
struct State {
    answer: Option<Answer>,
    /// Set once the answer was taken by `wait` or `poll`.
    taken: bool,
    waker: Option<Waker>,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a plain value: a panic elsewhere can't leave it
        // half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the ticket was dropped before the answer came.
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// Answers the request (once; later answers are ignored, and `false`
    /// says so) and wakes whoever waits.
    pub(crate) fn answer(&self, answer: Answer) -> bool {
        let waker = {
            let mut s = self.lock();
            if s.answer.is_some() || s.taken {
                return false;
            }
            s.answer = Some(answer);
            s.waker.take()
        };
        self.ready.notify_all();
        if let Some(w) = waker {
            // A waker that panics is its executor's bug: the answer is
            // stored all the same (the next poll or `wait` takes it), and
            // the worker answering goes on to the next request.
            super::panics::quietly(|| w.wake());
        }
        true
    }
}

/// A submitted request's answer to come: [`wait`](Ticket::wait) for it on
/// a thread, or `.await` it (a `Ticket` is a [`Future`], woken by the
/// worker; no async runtime of its own).
///
/// Dropping a ticket before its answer cancels the request: if no worker
/// has started computing it, it is removed from the queue uncomputed and
/// counted as cancelled ([`BatchStats::cancelled`](super::BatchStats)).
#[must_use = "dropping a ticket cancels its request"]
pub struct Ticket {
    slot: Arc<Slot>,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("ready", &self.is_ready())
            .finish()
    }
}

impl Ticket {
    /// A ticket and the slot its request answers into.
    pub(crate) fn new() -> (Ticket, Arc<Slot>) {
        let slot = Arc::new(Slot::default());
        (
            Ticket {
                slot: Arc::clone(&slot),
            },
            slot,
        )
    }

    /// Blocks this thread until the request is answered.
    ///
    /// # Errors
    /// The request's [`BatchError`]: its deadline passed before it was
    /// computed, its forward failed or panicked, or the batcher closed.
    pub fn wait(self) -> Result<Vec<Tensor>, BatchError> {
        let mut s = self.slot.lock();
        loop {
            if let Some(a) = s.answer.take() {
                s.taken = true;
                return a;
            }
            s = self
                .slot
                .ready
                .wait(s)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Whether the answer has come (`wait` would not block).
    pub fn is_ready(&self) -> bool {
        self.slot.lock().answer.is_some()
    }
}

impl Future for Ticket {
    type Output = Result<Vec<Tensor>, BatchError>;

    /// # Panics
    /// If polled again after it returned `Ready`.
    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let mut s = self.slot.lock();
        if let Some(a) = s.answer.take() {
            s.taken = true;
            return Poll::Ready(a);
        }
        assert!(
            !s.taken,
            "tch_scope::batch::Ticket polled after it completed"
        );
        match &mut s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            w => *w = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.slot.gone.store(true, Ordering::Release);
    }
}
