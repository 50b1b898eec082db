//! Memory scopes: `gpu_memory_scope` (the CUDA caching allocator),
//! `memory_scope` (the process's resident memory) and `tensor_memory` (the
//! tensor storage one thread allocates and frees), reporting to
//! [`crate::report`] and as a [`MemoryReport`] value.
//!
//! The CUDA and resident peaks are device- or process-wide counters that
//! can only be reset, so the naive pattern (reset at entry, read at exit)
//! lets an inner scope wipe out its outer scope's peak. [`peak::Tracker`] keeps, per device, the
//! open scopes' running peaks: before any reset it folds the counter's
//! current peak into every open scope, so each scope — nested, sibling, or
//! on another thread — reports its own true peak. `tensor_memory` needs no
//! reset: it sees every allocation and keeps each open scope's own counts.

/// The `Scope` hooks every memory guard shares (inside `impl Scope`): an
/// `Err` the expansion saw marks the run failed, and its `tracing` span is
/// left while a future holding the guard waits. The guard has
/// `mark_failed()` and a `span: GuardSpan`.
macro_rules! measurement_hooks {
    () => {
        /// An `Err` the expansion saw is recorded as a failed run.
        #[inline(always)]
        fn exit(guard: &mut Self::Guard, outcome: $crate::report::Outcome) {
            if outcome == $crate::report::Outcome::Failed {
                guard.mark_failed();
            }
        }

        /// Steps out of its `tracing` span while the future waits.
        #[inline(always)]
        fn suspend(guard: &mut Self::Guard) {
            guard.span.suspend();
        }

        /// Re-enters its `tracing` span on the polling thread.
        #[inline(always)]
        fn resume(guard: &mut Self::Guard) {
            guard.span.resume();
        }
    };
}

mod gpu;
mod host;
mod peak;
mod tensor;

use std::cell::RefCell;

pub use gpu::{GpuMemory, GpuMemoryGuard};
pub use host::{HostMemory, HostMemoryGuard};
pub use tensor::{TensorMemory, TensorMemoryGuard};

use crate::report::{self, Measurement, MemoryReport};
use crate::trace::{self, Kind, SpanRecord};

thread_local! {
    static LAST: RefCell<Option<MemoryReport>> = const { RefCell::new(None) };
}

/// The report of the memory scope most recently left on this thread.
///
/// ```no_run
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

/// The clock at entry, if the trace records.
fn trace_start() -> Option<u64> {
    trace::recording().then(crate::clock::now)
}

/// Sends a finished report everywhere it goes (the trace too, if the
/// scope was entered while it recorded). `level` is the trace's counter
/// at entry, when it differs from `r.at_entry` (`tensor_memory`: the
/// thread's level).
fn finish(r: MemoryReport, start: Option<u64>, kind: Kind, level: Option<i64>) {
    if let Some(start) = start {
        let level = level.unwrap_or_else(|| i64::try_from(r.at_entry).unwrap_or(i64::MAX));
        trace::push(&SpanRecord {
            kind,
            name: trace::intern(r.name),
            start,
            end: crate::clock::now(),
            outcome: r.outcome,
            bytes: [r.at_entry, r.at_exit, r.peak, level.cast_unsigned()],
        });
    }
    report::record_memory(&r);
    report::publish(|| Measurement::Memory(r.clone()));
    LAST.with(|l| *l.borrow_mut() = Some(r));
}
