//! `memory_scope`: the process's resident memory, from `/proc/self/status`.
//! The kernel resets its high-water mark (VmHWM) when "5" is written to
//! `/proc/self/clear_refs` (Linux ≥ 4.0); where that is refused, the report
//! says `peak_is_scoped: false`.

use std::convert::Infallible;
use std::marker::PhantomData;

use super::{finish, trace_start};
use crate::trace::Kind;
use super::peak::{Counter, Ticket, Tracker};
use crate::Scope;
use crate::report::{MemoryReport, Outcome};

static TRACKER: Tracker = Tracker::new();

struct Proc;

fn status_kib(key: &str) -> Result<u64, String> {
    let s = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or_else(|| format!("/proc/self/status has no {key} line"))
}

impl Counter for Proc {
    fn current(&self) -> Result<u64, String> {
        Ok(status_kib("VmRSS:")? * 1024)
    }
    fn peak(&self) -> Result<u64, String> {
        Ok(status_kib("VmHWM:")? * 1024)
    }
    fn reset_peak(&self) -> Result<bool, String> {
        Ok(std::fs::write("/proc/self/clear_refs", "5").is_ok())
    }
}

/// The `memory_scope` scope: resident memory at entry, exit and its peak.
///
/// ```
/// use tch_scope::{HostMemory, Scope};
/// let g = HostMemory::new("doc_host").enter().unwrap();
/// let v = vec![1u8; 32 << 20];
/// let report = g.finish().expect("/proc/self/status is readable");
/// assert!(report.peak_growth() >= 30 << 20);
/// drop(v);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct HostMemory {
    name: &'static str,
}

impl HostMemory {
    /// Measures under `name`.
    ///
    /// ```
    /// let _ = tch_scope::HostMemory::new("load");
    /// ```
    pub fn new(name: &'static str) -> Self {
        Self { name }
    }
}

/// Reports when dropped (or on [`finish`](Self::finish)).
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
pub struct HostMemoryGuard {
    name: &'static str,
    ticket: Option<Ticket>,
    /// The clock at entry, while the trace records.
    start: Option<u64>,
    failed: bool,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for HostMemoryGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostMemoryGuard")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Scope for HostMemory {
    type Guard = HostMemoryGuard;
    type Error = Infallible;

    /// Never fails: where `/proc/self/status` can't be read, the exit hook
    /// hears why and the scope reports nothing.
    fn enter(&mut self) -> Result<HostMemoryGuard, Infallible> {
        if !crate::report::is_enabled() {
            return Ok(HostMemoryGuard {
                name: self.name,
                ticket: None,
                start: None,
                failed: false,
                _not_send: PhantomData,
            });
        }
        let start = trace_start();
        let ticket = TRACKER
            .enter(&Proc)
            .map_err(|r| crate::exit::report(format!("memory_scope({:?})", self.name), r))
            .ok();
        Ok(HostMemoryGuard {
            name: self.name,
            ticket,
            start,
            failed: false,
            _not_send: PhantomData,
        })
    }
}

impl HostMemoryGuard {
    /// Records this run as [`Outcome::Failed`] (the body returned an `Err`);
    /// attributes on functions returning `Result` call it for you.
    pub fn mark_failed(&mut self) {
        self.failed = true;
    }

    /// Leaves the scope now and returns its report (also recorded as
    /// usual); `None` where `/proc/self/status` could not be read at entry.
    pub fn finish(mut self) -> Option<MemoryReport> {
        self.close()
    }

    fn close(&mut self) -> Option<MemoryReport> {
        let t = self.ticket.take()?;
        let peak = TRACKER.exit(&Proc, &t).unwrap_or(t.at_entry);
        let at_exit = Proc.current().unwrap_or(0);
        let r = MemoryReport {
            name: self.name,
            device: "cpu".into(),
            at_entry: t.at_entry,
            at_exit,
            peak: peak.max(at_exit),
            reserved: None,
            peak_is_scoped: t.scoped,
            outcome: Outcome::at_exit(self.failed),
        };
        finish(r.clone(), self.start, Kind::HostMemory);
        Some(r)
    }
}

impl Drop for HostMemoryGuard {
    fn drop(&mut self) {
        self.close();
    }
}
