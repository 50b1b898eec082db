//! `tensor_memory`: bytes of tensor storage this thread allocates and frees
//! inside the scope, on every device, as libtorch's allocators report them
//! to the thread's memory reporter (what `torch.profiler.profile(
//! profile_memory=True)` records), through `csrc/tensor_memory.cpp`.

use std::mem::{align_of, offset_of, size_of};

use super::{finish, trace_start};
use crate::report::{MemoryReport, Outcome};
use crate::trace::Kind;
use crate::tracing_span::{GuardSpan, guard_span};
use crate::{Scope, ScopeError, ffi};

/// The shim's `tch_scope_tensor_memory_counts` (`csrc/tensor_memory.h`,
/// which asserts the same layout).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    net: i64,
    peak: i64,
    lowest: i64,
    allocated: u64,
    freed: u64,
    devices: u64,
    level: i64,
}

const _: () = {
    assert!(size_of::<Counts>() == 56 && align_of::<Counts>() == 8);
    assert!(offset_of!(Counts, net) == 0 && offset_of!(Counts, peak) == 8);
    assert!(offset_of!(Counts, lowest) == 16 && offset_of!(Counts, allocated) == 24);
    assert!(offset_of!(Counts, freed) == 32 && offset_of!(Counts, devices) == 40);
    assert!(offset_of!(Counts, level) == 48);
};

unsafe extern "C" {
    fn tch_scope_tensor_memory_enter(id: *mut u64, level: *mut i64) -> ffi::Status;
    fn tch_scope_tensor_memory_exit(id: u64, out: *mut Counts) -> ffi::Status;
}

/// The devices of the shim's bit set: `cpu`, `cuda:N`, joined by `+`.
fn devices(bits: u64) -> String {
    let mut names = Vec::new();
    if bits & 1 != 0 {
        names.push("cpu".to_owned());
    }
    for i in 0..62 {
        if bits & (1 << (1 + i)) != 0 {
            names.push(format!("cuda:{i}"));
        }
    }
    if bits & (1 << 63) != 0 {
        names.push("other".to_owned());
    }
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join("+")
    }
}

/// The `tensor_memory` scope: the bytes of tensor storage allocated and
/// freed on this thread while it is open, on every device libtorch
/// reports (CPU and CUDA), with the net ([`MemoryReport::delta`]) and the
/// peak of live bytes above the level at entry
/// ([`MemoryReport::peak_growth`]); [`MemoryReport::allocated`] and
/// [`MemoryReport::freed`] hold the two sums. Unlike `memory_scope` and
/// `gpu_memory_scope` it sees only tensors, only this thread's, and exactly
/// (no allocator cache, no page rounding). Nested scopes each keep their
/// own peak and may close in any order.
///
/// What it does not see, and what that means:
/// - **A free on another thread** of a tensor allocated here is reported
///   to that thread, not to this scope: a tensor handed to another thread
///   that drops it inside the scope stays counted in `delta()`, as if kept.
///   Likewise a tensor allocated on another thread and freed here counts
///   as a free, and can make `delta()` negative.
/// - **Frees of tensors older than any reporting**: libtorch's CPU
///   allocator knows a block's size at free time only if it was allocated
///   while memory reporting was on (a `tensor_memory` or a memory-recording
///   profile, on any thread); frees of other CPU tensors are not seen (and
///   libtorch may log once "Memory block of unknown size was allocated
///   before the profiling started").
/// - **Other tasks on the thread**: in an attributed `async fn` the scope
///   covers the whole future on the one thread that polls it (the guard is
///   `!Send`), so tasks polled on that thread while it waits (a `LocalSet`,
///   a current-thread runtime) are counted too. Measure a synchronous
///   section (`scoped!` around the work between awaits) for exact bytes.
/// - Work libtorch runs for this thread on its own worker threads, which
///   carry this thread's reporter (the autograd engine's device threads,
///   `at::launch`), is counted here, as PyTorch's profiler counts it; so is
///   work under `with(ctx)` of a [`Context`](crate::Context) captured
///   inside the scope. A `tensor_memory` opened there counts that thread's
///   share and passes it on to the carried scopes.
///
/// A [`profile`](crate::Profile) inside it records memory events (whatever
/// its [`memory`](crate::Profile::memory) says) and the scope counts them
/// when the profile stops; a `tensor_memory` cannot open inside a running
/// profiler on the same thread (libtorch's profiler must be the thread's
/// only memory reporter while it runs): entering fails with a
/// [`ScopeError`].
///
/// ```
/// use tch::{Device, Kind, Tensor};
/// use tch_scope::{Scope, TensorMemory};
/// let g = TensorMemory::new("doc_tensor").enter().unwrap();
/// let kept = Tensor::zeros([1024, 256], (Kind::Float, Device::Cpu)); // 1 MiB
/// drop(Tensor::zeros([1024, 512], (Kind::Float, Device::Cpu))); // 2 MiB, freed
/// let r = g.finish().unwrap();
/// assert_eq!(r.delta(), 1 << 20);
/// assert_eq!(r.peak_growth(), 3 << 20);
/// assert_eq!((r.allocated, r.freed), (Some(3 << 20), Some(2 << 20)));
/// drop(kept);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TensorMemory {
    name: &'static str,
}

impl TensorMemory {
    /// Measures under `name`.
    pub fn new(name: &'static str) -> Self {
        Self { name }
    }
}

/// Reports when dropped (or on [`finish`](Self::finish)).
///
/// `!Send` ([`PhantomNotSend`](crate::PhantomNotSend)): it counts one
/// thread's allocations, so it must close on that thread; an attributed
/// `async fn` with `tensor_memory` is therefore not `Send`.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
pub struct TensorMemoryGuard {
    name: &'static str,
    /// The shim's id of this scope, while open.
    id: Option<u64>,
    /// The clock at entry, while the trace records.
    start: Option<u64>,
    /// The thread's level at entry (the trace's counter track).
    level: i64,
    failed: bool,
    _not_send: crate::PhantomNotSend,
    /// Last field: exited after the report is published inside it.
    span: GuardSpan,
}

impl std::fmt::Debug for TensorMemoryGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorMemoryGuard")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Scope for TensorMemory {
    type Guard = TensorMemoryGuard;
    type Error = ScopeError;

    /// Reading the counts at exit never fails the work (a failure goes to
    /// the exit hook).
    const EXIT_CAN_FAIL: bool = false;

    measurement_hooks!();

    /// Fails only inside a profiler running on this thread (see the type's
    /// docs).
    fn enter(&mut self) -> Result<TensorMemoryGuard, ScopeError> {
        if !crate::report::is_enabled() {
            return Ok(TensorMemoryGuard {
                name: self.name,
                id: None,
                start: None,
                level: 0,
                failed: false,
                _not_send: crate::PhantomNotSend::NEW,
                span: GuardSpan::NONE,
            });
        }
        let start = trace_start();
        let (mut id, mut level) = (0, 0);
        // SAFETY: writable out-params; exceptions caught by the shim.
        ffi::check(unsafe { tch_scope_tensor_memory_enter(&mut id, &mut level) })
            .map_err(|e| ScopeError::new(format!("tensor_memory({:?})", self.name), None, e))?;
        Ok(TensorMemoryGuard {
            name: self.name,
            id: Some(id),
            start,
            level,
            failed: false,
            _not_send: crate::PhantomNotSend::NEW,
            span: guard_span!(target: "tch_scope", "tensor_memory", name = self.name),
        })
    }
}

impl TensorMemoryGuard {
    /// Records this run as [`Outcome::Failed`] (the body returned an `Err`);
    /// attributes on functions returning `Result` call it for you.
    pub fn mark_failed(&mut self) {
        self.failed = true;
    }

    /// Leaves the scope now and returns its report (also recorded as
    /// usual); `None` where measuring was switched off at entry
    /// ([`report::set_enabled`](crate::report::set_enabled)).
    pub fn finish(mut self) -> Option<MemoryReport> {
        self.close()
    }

    fn close(&mut self) -> Option<MemoryReport> {
        let id = self.id.take()?;
        let mut c = Counts::default();
        // SAFETY: a writable out-param; same thread as entry (!Send).
        if let Err(e) = ffi::check(unsafe { tch_scope_tensor_memory_exit(id, &mut c) }) {
            crate::exit::report(format!("tensor_memory({:?})", self.name), e);
            return None;
        }
        // Levels count from the lowest point, so all are non-negative.
        let base = c.lowest.unsigned_abs();
        let level = |v: i64| base.saturating_add_signed(v);
        let r = MemoryReport {
            name: self.name,
            device: devices(c.devices),
            at_entry: base,
            at_exit: level(c.net),
            peak: level(c.peak),
            reserved: None,
            peak_is_scoped: true,
            outcome: Outcome::at_exit_or(if self.failed {
                Outcome::Failed
            } else {
                Outcome::Completed
            }),
            allocated: Some(c.allocated),
            freed: Some(c.freed),
        };
        finish(r.clone(), self.start, Kind::TensorMemory, Some(self.level));
        Some(r)
    }
}

impl Drop for TensorMemoryGuard {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::devices;

    #[test]
    fn device_names() {
        assert_eq!(devices(0), "none");
        assert_eq!(devices(1), "cpu");
        assert_eq!(devices(1 | 1 << 1 | 1 << 3), "cpu+cuda:0+cuda:2");
        assert_eq!(devices(1 << 63), "other");
    }
}
