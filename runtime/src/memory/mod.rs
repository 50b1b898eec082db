//! Memory scopes: `gpu_memory_scope` (the CUDA caching allocator) and
//! `memory_scope` (the process's resident memory), reporting to
//! [`crate::report`] and as a [`MemoryReport`] value.
//!
//! Both peaks are device- or process-wide counters that can only be reset,
//! so the naive pattern (reset at entry, read at exit) lets an inner scope
//! wipe out its outer scope's peak. [`peak::Tracker`] keeps, per device, the
//! open scopes' running peaks: before any reset it folds the counter's
//! current peak into every open scope, so each scope — nested, sibling, or
//! on another thread — reports its own true peak.

pub(crate) mod cuda;
mod gpu;
mod host;
mod peak;

use std::cell::RefCell;

use serde::Serialize;

pub use gpu::{GpuMemory, GpuMemoryGuard};
pub use host::{HostMemory, HostMemoryGuard};

use crate::report::{self, Measurement, Outcome};

/// What a memory scope saw, in bytes. For `gpu_memory_scope`: the caching
/// allocator's allocated bytes (as `torch.cuda.memory_allocated()`); for
/// `memory_scope`: the process's resident set (VmRSS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryReport {
    /// The scope's name.
    pub name: &'static str,
    /// `cpu` for `memory_scope`, `cuda:N` for `gpu_memory_scope`.
    pub device: String,
    /// Bytes in use when the scope was entered.
    pub at_entry: u64,
    /// Bytes in use when it was left.
    pub at_exit: u64,
    /// Highest bytes in use while it was open.
    pub peak: u64,
    /// Bytes the CUDA caching allocator held from the driver at exit, before
    /// any `empty_cache` (`torch.cuda.memory_reserved()`); `None` for host
    /// memory.
    pub reserved: Option<u64>,
    /// `false` when the peak counter could not be reset (host memory where
    /// the kernel refuses `/proc/self/clear_refs`): `peak` is then the
    /// process's peak so far, an upper bound.
    pub peak_is_scoped: bool,
    /// How the body ended.
    pub outcome: Outcome,
}

impl MemoryReport {
    /// `at_exit - at_entry`: what the scope left allocated (negative if it
    /// freed more than it allocated).
    ///
    /// ```
    /// # let r = tch_scope::MemoryReport { name: "x", device: "cpu".into(), at_entry: 10, at_exit: 4,
    /// #     peak: 30, reserved: None, peak_is_scoped: true, outcome: tch_scope::report::Outcome::Completed };
    /// assert_eq!(r.delta(), -6);
    /// ```
    pub fn delta(&self) -> i64 {
        self.at_exit as i64 - self.at_entry as i64
    }

    /// `peak - at_entry`: the most the scope added on top of what was in
    /// use when it began.
    ///
    /// ```
    /// # let r = tch_scope::MemoryReport { name: "x", device: "cpu".into(), at_entry: 10, at_exit: 4,
    /// #     peak: 30, reserved: None, peak_is_scoped: true, outcome: tch_scope::report::Outcome::Completed };
    /// assert_eq!(r.peak_growth(), 20);
    /// ```
    pub fn peak_growth(&self) -> u64 {
        self.peak.saturating_sub(self.at_entry)
    }
}

thread_local! {
    static LAST: RefCell<Option<MemoryReport>> = const { RefCell::new(None) };
}

/// The report of the memory scope most recently left on this thread.
///
/// ```
/// use tch_scope::{last_memory_report, scoped};
/// let t = scoped!(memory_scope("doc_last") => {
///     tch::Tensor::ones([16 << 20], (tch::Kind::Float, tch::Device::Cpu)) // 64 MiB
/// });
/// let r = last_memory_report().unwrap();
/// assert_eq!(r.name, "doc_last");
/// assert!(r.peak_growth() > 32 << 20);
/// drop(t);
/// ```
pub fn last_memory_report() -> Option<MemoryReport> {
    LAST.with(|l| l.borrow().clone())
}

/// Sends a finished report everywhere it goes.
fn finish(r: MemoryReport) {
    report::record_memory(&r);
    report::publish(|| Measurement::Memory(r.clone()));
    LAST.with(|l| *l.borrow_mut() = Some(r));
}
