//! The checkpoints open on each thread, innermost last, and what the body
//! reaches through them without a handle: the metric log ([`log_metric`],
//! [`metrics`]) and the step loop's boundaries ([`steps`](super::steps)).

use std::cell::RefCell;
use std::sync::{Arc, Mutex};

use super::log::Metrics;
use super::snapshot::Boundaries;
use crate::sync::lock;

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
