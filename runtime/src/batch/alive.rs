//! [`Alive`]: a worker thread counted while it runs, and what happens to
//! the queue when the last one ends.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{BatchError, Shared};
use crate::Servable;

/// Moved into a worker thread: counts it in [`Shared::live`] until the
/// thread ends, however it ends (its loop returning at shutdown, or a
/// panic outside the per-batch guard, which no request or option should
/// cause). When the last worker goes, the queue is closed and what waits
/// in it is answered [`BatchError::Closed`] at once, as is every later
/// submission: nothing is left waiting for a worker that will not come.
pub(super) struct Alive<M: Servable>(Arc<Shared<M>>);

impl<M: Servable> Alive<M> {
    /// Counts one more worker.
    pub(super) fn new(shared: Arc<Shared<M>>) -> Self {
        shared.live.fetch_add(1, Ordering::SeqCst);
        Alive(shared)
    }

    pub(super) fn shared(&self) -> &Shared<M> {
        &self.0
    }
}

impl<M: Servable> Drop for Alive<M> {
    fn drop(&mut self) {
        let orphans = {
            // Under the queue's lock, as `submit_in`'s check of `closed`:
            // no request is queued after the last worker has gone.
            let mut q = self.0.lock();
            if self.0.live.fetch_sub(1, Ordering::SeqCst) != 1 {
                return;
            }
            q.closed = true;
            std::mem::take(&mut q.requests)
        };
        for r in orphans {
            r.slot.answer(Err(BatchError::Closed));
        }
    }
}
