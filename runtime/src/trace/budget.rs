//! The process-wide bound on trace memory: every chunk of every thread's
//! buffer is reserved from a [`Budget`] before it is allocated, and given
//! back when its buffer is freed.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of span buffers the trace may hold, all threads together, unless
/// [`set_memory_limit`](super::set_memory_limit) says otherwise (512 MiB:
/// nine threads' full buffers at the default capacity).
pub(crate) const DEFAULT_LIMIT: usize = 512 << 20;

/// A limit in bytes and what is taken of it.
pub(crate) struct Budget {
    limit: AtomicUsize,
    used: AtomicUsize,
}

/// The trace's budget.
pub(crate) static GLOBAL: Budget = Budget::new(DEFAULT_LIMIT);

impl Budget {
    pub(crate) const fn new(limit: usize) -> Self {
        Self {
            limit: AtomicUsize::new(limit),
            used: AtomicUsize::new(0),
        }
    }

    pub(crate) fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, Ordering::Relaxed);
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes `bytes`; `false` (nothing taken) when that would pass the
    /// limit.
    pub(crate) fn reserve(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&u| u <= self.limit())
            })
            .is_ok()
    }

    /// Gives `bytes` back.
    pub(crate) fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserving_past_the_limit_takes_nothing() {
        let b = Budget::new(100);
        assert!(b.reserve(60));
        assert!(!b.reserve(60), "60 + 60 > 100");
        assert_eq!(b.used(), 60, "a refused reservation takes nothing");
        assert!(!b.reserve(usize::MAX), "no overflow");
        assert!(b.reserve(40));
        b.release(60);
        assert_eq!(b.used(), 40);
        b.set_limit(10);
        assert!(!b.reserve(1), "a lower limit refuses until enough is freed");
    }
}
