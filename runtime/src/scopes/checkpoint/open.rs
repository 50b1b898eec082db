//! The checkpoints open on each thread, innermost last, and what the body
//! reaches through them without a handle: the metric log ([`log_metric`],
//! [`metrics`]) and the step loop's boundaries ([`steps`](super::steps)).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::snapshot::Boundaries;
use crate::sync::lock;

/// A checkpoint's metric log: every value appended under each name, in
/// order.
///
/// ```
/// use tch_scope::{log_metric, metrics, scoped};
/// let vs = tch::nn::VarStore::new(tch::Device::Cpu);
/// let path = std::env::temp_dir().join(format!("doc-metrics-{}.ot", std::process::id()));
/// let log = scoped!(checkpoint(vs, &path) => {
///     log_metric("loss", 0.5);
///     log_metric("loss", 0.25);
///     metrics().unwrap()
/// });
/// assert_eq!(log.get("loss"), [0.5, 0.25]);
/// assert_eq!(log.names().collect::<Vec<_>>(), ["loss"]);
/// # std::fs::remove_file(&path).unwrap();
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics(pub(super) BTreeMap<String, Vec<f64>>);

impl Metrics {
    /// The values logged under `name` (empty if none).
    ///
    /// ```no_run
    /// assert!(tch_scope::Metrics::default().get("loss").is_empty());
    /// ```
    pub fn get(&self, name: &str) -> &[f64] {
        self.0.get(name).map_or(&[], Vec::as_slice)
    }

    /// The names logged, sorted.
    ///
    /// ```no_run
    /// assert_eq!(tch_scope::Metrics::default().names().count(), 0);
    /// ```
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// How many values each name has: a step boundary's mark.
    pub(super) fn lengths(&self) -> Vec<(String, usize)> {
        self.0.iter().map(|(n, v)| (n.clone(), v.len())).collect()
    }

    /// The log as it was at `lengths` (values are only ever appended).
    pub(super) fn truncated(&self, lengths: &[(String, usize)]) -> Metrics {
        Metrics(
            lengths
                .iter()
                .map(|(n, len)| (n.clone(), self.get(n)[..*len].to_vec()))
                .collect(),
        )
    }
}

/// One open checkpoint as the thread (and a `steps` loop) sees it: its
/// metric log and its step boundaries. Locks, not `RefCell`s: the guard of
/// a task moves between threads with it. Lock order: `boundaries`, then
/// `log`.
pub(super) struct Run {
    pub(super) log: Mutex<Metrics>,
    pub(super) boundaries: Mutex<Boundaries>,
}

thread_local! {
    /// The checkpoints open on this thread, innermost last: those entered
    /// here and not left, less those of tasks suspended meanwhile.
    static OPEN: RefCell<Vec<Arc<Run>>> = const { RefCell::new(Vec::new()) };
}

/// Puts `run` on top of this thread's open checkpoints.
pub(super) fn open(run: &Arc<Run>) {
    OPEN.with_borrow_mut(|open| open.push(Arc::clone(run)));
}

/// Takes `run` off this thread's open checkpoints, wherever it is (the
/// innermost usually; searched, so that hand-held guards dropped out of
/// order stay right). Returns whether another checkpoint is still open on
/// the thread.
pub(super) fn close(run: &Arc<Run>) -> bool {
    // `try_with`: a guard dropped while the thread's locals are torn down.
    OPEN.try_with(|open| {
        let mut open = open.borrow_mut();
        if let Some(i) = open.iter().rposition(|l| Arc::ptr_eq(l, run)) {
            open.remove(i);
        }
        !open.is_empty()
    })
    .unwrap_or(false)
}

/// The innermost open checkpoint of this thread.
pub(super) fn innermost() -> Option<Arc<Run>> {
    OPEN.with_borrow(|open| open.last().cloned())
}

/// Appends `value` under `name` to the innermost open checkpoint of this
/// thread; returns `false` (and logs nothing) when none is open.
///
/// ```no_run
/// assert!(!tch_scope::log_metric("loss", 1.0)); // no checkpoint open
/// ```
pub fn log_metric(name: &str, value: f64) -> bool {
    OPEN.with_borrow(|open| match open.last() {
        Some(run) => {
            let mut log = lock(&run.log);
            log.0.entry(name.to_owned()).or_default().push(value);
            true
        }
        None => false,
    })
}

/// A copy of the innermost open checkpoint's metric log on this thread
/// (after `resume`, what the file held plus what was logged since).
///
/// ```no_run
/// assert_eq!(tch_scope::metrics(), None);
/// ```
pub fn metrics() -> Option<Metrics> {
    OPEN.with_borrow(|open| open.last().map(|run| lock(&run.log).clone()))
}
