//! Where `timed` and the memory scopes send their measurements.
//!
//! Every measurement goes to (a) a process-wide registry, read with
//! [`report()`] as a table (`Display`) or as data (`serde::Serialize`);
//! (b) a `tracing` event (target `tch_scope`) when the `tracing` feature is
//! on, inside the scope's own `tracing` span (`timed`, `memory_scope`,
//! `gpu_memory_scope`, and `record` too, entered and exited with the scope); (c) the callback set with [`set_callback`], if any; (d) with the
//! `metrics` feature, the [`metrics`](https://docs.rs/metrics) facade (see
//! below). Nothing prints by default.
//!
//! # Bounds
//! Rows are per distinct name, and names made at run time can come
//! without end: past [`name_limit`] distinct names (default
//! [`DEFAULT_NAME_LIMIT`]), new names count in one row named [`OTHER`] and
//! the exit hook hears of it once ([`set_name_limit`]). Histogram buckets
//! are `u64` (they do not saturate), and [`report()`] groups its rows by a
//! hash map and one sort.
//!
//! # The `metrics` feature
//! Every `timed` run is also recorded, in seconds (`f64`), into the
//! histogram `tch_scope_timed_seconds` with the labels `name` (the row's
//! name: [`OTHER`] past the bound) and `outcome` (`completed`, `panicked`
//! or `failed`: [`Outcome::as_str`]); every memory scope records its peak
//! growth (peak − at entry, bytes) into `tch_scope_memory_bytes` with the
//! labels `name`, `device` (`cpu`, `cuda:N`) and `outcome`. The
//! application installs the recorder (an exporter such as
//! `metrics-exporter-prometheus`); without one, the facade drops them.
//! [`describe_metrics`] gives the recorder their units and help text.
//! Without the feature, none of this is compiled.

pub(crate) mod events;
mod histogram;
mod memory;
#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "metrics")]
pub use metrics::describe_metrics;
mod names;
mod registry;
mod shard;
mod table;
mod totals;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::Serialize;

pub use crate::outcome::Outcome;
pub use memory::MemoryReport;
pub use names::{DEFAULT_NAME_LIMIT, OTHER, name_limit, set_name_limit};
pub use registry::Site;
pub(crate) use registry::{lock, record_run, record_time};

/// One measurement, as handed to the callback.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Measurement {
    /// A `timed` scope ended.
    Time {
        /// The scope's name.
        name: &'static str,
        /// Wall time of the body (device time when synchronised).
        elapsed: Duration,
        /// Whether the device was synchronised at entry and exit.
        synced: bool,
        /// How the body ended.
        outcome: Outcome,
    },
    /// A `gpu_memory_scope`, `memory_scope` or `tensor_memory` ended.
    Memory(MemoryReport),
}

type Callback = Arc<dyn Fn(&Measurement) + Send + Sync>;

static HAS_CALLBACK: AtomicBool = AtomicBool::new(false);
static CALLBACK: RwLock<Option<Callback>> = RwLock::new(None);

/// Calls `f` with every measurement from now on, on the thread that made it
/// (replacing any earlier callback). A panic in `f` is caught and dropped:
/// measurements are taken in `Drop`, where a second panic would abort.
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// static SEEN: AtomicU32 = AtomicU32::new(0);
/// tch_scope::report::set_callback(|m| {
///     if let tch_scope::report::Measurement::Time { name: "doc_cb", .. } = m {
///         SEEN.fetch_add(1, Ordering::Relaxed);
///     }
/// });
/// tch_scope::scoped!(timed("doc_cb") => ());
/// assert_eq!(SEEN.load(Ordering::Relaxed), 1);
/// tch_scope::report::clear_callback();
/// ```
pub fn set_callback(f: impl Fn(&Measurement) + Send + Sync + 'static) {
    *crate::sync::write(&CALLBACK) = Some(Arc::new(f));
    HAS_CALLBACK.store(true, Ordering::Release);
}

/// Removes the callback.
///
/// ```
/// tch_scope::report::clear_callback();
/// ```
pub fn clear_callback() {
    HAS_CALLBACK.store(false, Ordering::Release);
    *crate::sync::write(&CALLBACK) = None;
}

/// Hands `m` to tracing and the callback (registry updates are the
/// caller's, since time and memory are kept differently).
#[inline]
pub(crate) fn publish(m: impl FnOnce() -> Measurement) {
    let tracing_on = cfg!(feature = "tracing");
    if tracing_on || HAS_CALLBACK.load(Ordering::Acquire) {
        hand_out(&m());
    }
}

#[inline(never)]
fn hand_out(m: &Measurement) {
    #[cfg(feature = "tracing")]
    trace(m);
    let cb = crate::sync::read(&CALLBACK).clone();
    if let Some(cb) = cb {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(m)));
    }
}

#[cfg(feature = "tracing")]
fn trace(m: &Measurement) {
    match m {
        Measurement::Time {
            name,
            elapsed,
            synced,
            outcome,
        } => tracing::info!(
            target: "tch_scope",
            name = *name,
            elapsed_ns = elapsed.as_nanos() as u64,
            synced = *synced,
            outcome = ?outcome,
            "timed"
        ),
        Measurement::Memory(r) => tracing::info!(
            target: "tch_scope",
            name = r.name,
            device = %r.device,
            at_entry = r.at_entry,
            at_exit = r.at_exit,
            peak = r.peak,
            reserved = ?r.reserved,
            outcome = ?r.outcome,
            "memory"
        ),
    }
}

/// Totals of one `timed` name across all threads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimingSummary {
    /// The scope's name.
    pub name: String,
    /// How many times it ran.
    pub count: u64,
    /// How many of those ended in a panic.
    pub panicked: u64,
    /// How many returned an `Err` (see [`Outcome::Failed`]).
    pub failed: u64,
    /// Sum of all durations.
    pub total: Duration,
    /// `total / count`.
    pub mean: Duration,
    /// Shortest.
    pub min: Duration,
    /// Longest.
    pub max: Duration,
    /// Median, from a streaming histogram (within ≈3 %).
    pub p50: Duration,
    /// 95th percentile, from the same histogram.
    pub p95: Duration,
}

/// Totals of one memory-scope name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemorySummary {
    /// The scope's name.
    pub name: String,
    /// How many times it ran.
    pub count: u64,
    /// The largest peak growth (peak − at entry) of any run, in bytes.
    pub max_peak_growth: u64,
    /// The most recent run.
    pub last: MemoryReport,
}

/// Everything recorded so far: [`report()`]. Prints as a table.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// One row per `timed` name, sorted by name.
    pub timings: Vec<TimingSummary>,
    /// One row per memory-scope name, sorted by name.
    pub memory: Vec<MemorySummary>,
}

impl Report {
    /// The timing row for `name`, if it ran.
    ///
    /// ```
    /// tch_scope::scoped!(timed("doc_report_timing") => ());
    /// let r = tch_scope::report();
    /// assert_eq!(r.timing("doc_report_timing").unwrap().count, 1);
    /// ```
    pub fn timing(&self, name: &str) -> Option<&TimingSummary> {
        // Sorted by name (as `report()` makes it): a binary search.
        self.timings
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.timings[i])
    }

    /// The memory row for `name`, if it ran.
    ///
    /// ```
    /// tch_scope::scoped!(memory_scope("doc_report_memory") => ());
    /// assert!(tch_scope::report().memory("doc_report_memory").is_some());
    /// ```
    pub fn memory(&self, name: &str) -> Option<&MemorySummary> {
        self.memory
            .binary_search_by(|m| m.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.memory[i])
    }
}

/// Memory rows by name (a hash map: a scope's lookup does not grow with
/// the number of names).
static MEMORY: Mutex<Option<HashMap<&'static str, MemorySummary>>> = Mutex::new(None);

/// Adds `r` to its name's row ([`OTHER`] past the bound on names), and
/// hands it to the `metrics` facade with the feature.
pub(crate) fn record_memory(r: &MemoryReport) {
    let growth = r.peak_growth();
    let row = {
        let mut all = lock(&MEMORY);
        let all = all.get_or_insert_with(HashMap::new);
        let row = if all.contains_key(r.name) || names::admit(r.name) {
            r.name
        } else {
            OTHER
        };
        all.entry(row)
            .and_modify(|m| {
                m.count += 1;
                m.max_peak_growth = m.max_peak_growth.max(growth);
                m.last = r.clone();
            })
            .or_insert_with(|| MemorySummary {
                name: row.to_owned(),
                count: 1,
                max_peak_growth: growth,
                last: r.clone(),
            });
        row
    };
    if row != r.name {
        let word = if r.allocated.is_some() {
            "tensor_memory"
        } else if r.device == "cpu" {
            "memory_scope"
        } else {
            "gpu_memory_scope"
        };
        names::refused(word, r.name);
    }
    #[cfg(feature = "metrics")]
    metrics::memory(row, &r.device, growth, r.outcome);
}

/// Hands one `timed` run to the `metrics` facade (with the feature; else
/// nothing, and nothing is compiled).
#[inline(always)]
pub(crate) fn record_time_metrics(site: &Site, ns: u64, outcome: Outcome) {
    #[cfg(feature = "metrics")]
    metrics::time(site, ns, outcome);
    #[cfg(not(feature = "metrics"))]
    let _ = (site, ns, outcome);
}

/// Everything recorded so far, across all threads.
///
/// Each thread accumulates its own totals without a lock; this merges
/// them. Read while other threads record, each figure is whole, but a run
/// ending at that moment may be counted in some figures and not yet in
/// others.
///
/// ```
/// tch_scope::scoped!(timed("doc_report") => std::thread::sleep(std::time::Duration::from_millis(1)));
/// let r = tch_scope::report();
/// let t = r.timing("doc_report").unwrap();
/// assert!(t.min >= std::time::Duration::from_millis(1));
/// println!("{r}"); // a table
/// ```
pub fn report() -> Report {
    events::resolve_all();
    let timings =
        registry::time_totals()
            .into_iter()
            .map(|(name, s)| {
                let ns = |n: u64| Duration::from_nanos(n);
                let q = |p: f64| ns(s.hist.quantile(p).unwrap_or(0).clamp(s.min_ns, s.max_ns));
                let total = Duration::from_nanos(u64::try_from(s.total_ns).unwrap_or(u64::MAX));
                TimingSummary {
                    name: name.to_owned(),
                    count: s.count,
                    panicked: s.panicked,
                    failed: s.failed,
                    total,
                    mean: ns(
                        u64::try_from(s.total_ns / u128::from(s.count.max(1))).unwrap_or(u64::MAX)
                    ),
                    min: ns(s.min_ns),
                    max: ns(s.max_ns),
                    p50: q(0.5),
                    p95: q(0.95),
                }
            })
            .collect();
    let mut memory: Vec<MemorySummary> = lock(&MEMORY)
        .as_ref()
        .map(|m| m.values().cloned().collect())
        .unwrap_or_default();
    memory.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    Report { timings, memory }
}

/// Forgets everything recorded so far.
///
/// ```
/// tch_scope::report::reset();
/// ```
pub fn reset() {
    registry::clear_times();
    *lock(&MEMORY) = None;
}

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns measuring on or off, process-wide, at run time: while off,
/// `timed` and the memory scopes read no clock or counter and record
/// nothing (a load and a branch at entry and at exit). On by default.
///
/// ```
/// tch_scope::report::set_enabled(false);
/// tch_scope::scoped!(timed("doc_disabled") => ());
/// tch_scope::report::set_enabled(true);
/// assert!(tch_scope::report().timing("doc_disabled").is_none());
/// ```
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether measuring is on (see [`set_enabled`]).
///
/// ```
/// assert!(tch_scope::report::is_enabled());
/// ```
#[inline]
pub fn is_enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}
