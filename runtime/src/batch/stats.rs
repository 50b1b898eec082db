//! [`BatchStats`]: what a batcher has done, counted as it goes.

use std::sync::atomic::{AtomicU64, Ordering};

/// A batcher's counts since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchStats {
    /// Requests submitted and queued (refused ones are not counted here).
    pub submitted: u64,
    /// Requests computed with success (Triton's inference count).
    pub inferences: u64,
    /// Forward runs with success, batched or alone (Triton's execution
    /// count): `inferences / executions` is the mean batch size.
    pub executions: u64,
    /// The most requests one successful forward computed.
    pub largest_batch: u64,
    /// Requests removed uncomputed because their deadline had passed.
    pub expired: u64,
    /// Requests removed uncomputed because their ticket was dropped.
    pub cancelled: u64,
    /// Requests answered with an error of their own forward, or a panic
    /// in their batch's handling.
    pub failed: u64,
    /// Batches that failed and whose requests then ran one by one.
    pub split_batches: u64,
    /// Requests refused when submitted, uncomputed: the queue was full
    /// ([`QueueFull`](super::BatchError::QueueFull)) or no worker was left
    /// ([`Closed`](super::BatchError::Closed)).
    pub refused: u64,
}

#[derive(Default)]
pub(super) struct Counts {
    pub submitted: AtomicU64,
    pub inferences: AtomicU64,
    pub executions: AtomicU64,
    pub largest_batch: AtomicU64,
    pub expired: AtomicU64,
    pub cancelled: AtomicU64,
    pub failed: AtomicU64,
    pub split_batches: AtomicU64,
    pub refused: AtomicU64,
}

impl Counts {
    pub(super) fn snapshot(&self) -> BatchStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BatchStats {
            submitted: get(&self.submitted),
            inferences: get(&self.inferences),
            executions: get(&self.executions),
            largest_batch: get(&self.largest_batch),
            expired: get(&self.expired),
            cancelled: get(&self.cancelled),
            failed: get(&self.failed),
            split_batches: get(&self.split_batches),
            refused: get(&self.refused),
        }
    }
}
