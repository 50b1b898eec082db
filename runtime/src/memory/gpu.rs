//! `gpu_memory_scope`: the CUDA caching allocator's statistics, like the
//! Python pattern `empty_cache(); reset_peak_memory_stats(); …;
//! max_memory_allocated()`, through the shim (tch exposes none).

use std::sync::OnceLock;

use tch::Device;

use super::peak::{Counter, Ticket, Tracker};
use super::{finish, trace_start};
use crate::cuda;
use crate::report::{MemoryReport, Outcome};
use crate::trace::Kind;
use crate::tracing_span::{GuardSpan, guard_span};
use crate::{Scope, ScopeError};

/// One tracker per CUDA device (peaks are per device).
fn tracker(device: i32) -> &'static Tracker {
    static ALL: OnceLock<Vec<Tracker>> = OnceLock::new();
    let all = ALL.get_or_init(|| {
        (0..crate::cuda_device_count())
            .map(|_| Tracker::new())
            .collect()
    });
    &all[device as usize]
}

struct Allocator(i32);

impl Counter for Allocator {
    fn current(&self) -> Result<u64, String> {
        Ok(cuda::stats(self.0)?.allocated.max(0) as u64)
    }
    fn read(&self) -> Result<(u64, u64), String> {
        let s = cuda::stats(self.0)?;
        Ok((s.allocated.max(0) as u64, s.allocated_peak.max(0) as u64))
    }
    fn reset_peak(&self) -> Result<bool, String> {
        cuda::reset_peak(self.0).map(|()| true)
    }
}

/// The `gpu_memory_scope` scope.
///
/// ```no_run
/// use tch_scope::{GpuMemory, Scope};
/// let scope = GpuMemory::new("doc_gpu", 0).empty_cache(false);
/// if tch_scope::cuda_device_count() == 0 {
///     let e = { let mut s = scope; s.enter().unwrap_err() };
///     assert!(e.reason().contains("CUDA is not available"));
/// }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct GpuMemory {
    name: &'static str,
    device: usize,
    empty_cache: bool,
}

impl GpuMemory {
    /// Measures cuda:`device` under `name`, emptying the cache before and
    /// after (the usual Python pattern; see [`empty_cache`](Self::empty_cache)).
    pub fn new(name: &'static str, device: usize) -> Self {
        Self {
            name,
            device,
            empty_cache: true,
        }
    }

    /// Whether to call `empty_cache` before entry and after exit, so
    /// `reserved` shows what the scope itself needed. `empty_cache` frees
    /// only unused cached blocks, never live tensors.
    pub fn empty_cache(mut self, on: bool) -> Self {
        self.empty_cache = on;
        self
    }
}

/// Reports when dropped (or on [`finish`](Self::finish)).
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
pub struct GpuMemoryGuard {
    scope: GpuMemory,
    index: i32,
    ticket: Option<Ticket>,
    /// The clock at entry, while the trace records.
    start: Option<u64>,
    failed: bool,
    /// Last field: exited after the report is published inside it.
    span: GuardSpan,
}

impl std::fmt::Debug for GpuMemoryGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuMemoryGuard")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Scope for GpuMemory {
    type Guard = GpuMemoryGuard;
    type Error = ScopeError;

    measurement_hooks!();

    fn enter(&mut self) -> Result<GpuMemoryGuard, ScopeError> {
        let name = format!("gpu_memory_scope(device = {})", self.device);
        let index = cuda::require(&name, self.device)?;
        let fail = |r: String| ScopeError::new(name.clone(), Some(Device::Cuda(self.device)), r);
        if !crate::report::is_enabled() {
            return Ok(GpuMemoryGuard {
                scope: *self,
                index,
                ticket: None,
                start: None,
                failed: false,
                span: GuardSpan::NONE,
            });
        }
        let start = trace_start();
        if self.empty_cache {
            cuda::empty_cache().map_err(fail)?;
        }
        let ticket = tracker(index).enter(&Allocator(index)).map_err(fail)?;
        Ok(GpuMemoryGuard {
            scope: *self,
            index,
            ticket: Some(ticket),
            start,
            failed: false,
            span: guard_span!(
                target: "tch_scope",
                "gpu_memory_scope",
                name = self.name,
                device = index
            ),
        })
    }
}

impl GpuMemoryGuard {
    /// Records this run as [`Outcome::Failed`] (the body returned an `Err`);
    /// attributes on functions returning `Result` call it for you.
    pub fn mark_failed(&mut self) {
        self.failed = true;
    }

    /// Leaves the scope now and returns its report (also recorded as
    /// usual); `None` where measuring was switched off at entry
    /// ([`report::set_enabled`](crate::report::set_enabled)), as
    /// [`HostMemoryGuard::finish`](crate::HostMemoryGuard::finish).
    pub fn finish(mut self) -> Option<MemoryReport> {
        self.close()
    }

    fn close(&mut self) -> Option<MemoryReport> {
        let t = self.ticket.take()?;
        let a = Allocator(self.index);
        let (peak, at_exit) = tracker(self.index)
            .exit(&a, &t)
            .unwrap_or_else(|_| (t.at_entry, a.current().unwrap_or(0)));
        // Read before emptying: what the scope made the cache hold.
        let reserved = cuda::stats(self.index)
            .ok()
            .map(|s| s.reserved.max(0) as u64);
        if self.scope.empty_cache {
            let _ = cuda::empty_cache();
        }
        let r = MemoryReport {
            name: self.scope.name,
            device: format!("cuda:{}", self.index),
            at_entry: t.at_entry,
            at_exit,
            peak: peak.max(at_exit),
            reserved,
            peak_is_scoped: true,
            outcome: Outcome::at_exit_or(if self.failed {
                Outcome::Failed
            } else {
                Outcome::Completed
            }),
            allocated: None,
            freed: None,
        };
        finish(r.clone(), self.start, Kind::GpuMemory, None);
        Some(r)
    }
}

impl Drop for GpuMemoryGuard {
    fn drop(&mut self) {
        self.close();
    }
}
