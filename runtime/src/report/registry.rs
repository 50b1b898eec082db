//! Where measurements accumulate: per call site, per thread, merged on read.
//!
//! The hot path (one `timed` exit) locks only its own thread's shard, which
//! no other thread touches except while a report is being read, so the lock
//! is uncontended; the call site's id is assigned once and cached in the
//! site's static, so no name is hashed either. A thread's shard is merged
//! into the retired totals when the thread exits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::Outcome;
use super::histogram::Histogram;

/// A place in the code that records measurements under one name. The
/// macros make one `static` per use; [`Site::named`] finds or makes one for
/// a name at run time.
///
/// ```
/// use tch_scope::report::Site;
/// static SITE: Site = Site::new("load");
/// assert_eq!(SITE.name(), "load");
/// assert!(std::ptr::eq(Site::named("x"), Site::named("x")));
/// ```
#[derive(Debug)]
pub struct Site {
    name: &'static str,
    /// id + 1, or 0 before the first use.
    id: AtomicUsize,
}

static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain counters
    // behind, still consistent enough to report: ignore the poison.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Site {
    /// A site recording under `name`.
    ///
    /// ```
    /// static S: tch_scope::report::Site = tch_scope::report::Site::new("step");
    /// ```
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            id: AtomicUsize::new(0),
        }
    }

    /// The site for `name`, made on first use (a lock and a lookup: for
    /// code that has no `static` of its own).
    ///
    /// ```
    /// assert_eq!(tch_scope::report::Site::named("epoch").name(), "epoch");
    /// ```
    pub fn named(name: &'static str) -> &'static Site {
        static BY_NAME: Mutex<Option<HashMap<&'static str, &'static Site>>> = Mutex::new(None);
        let mut map = lock(&BY_NAME);
        map.get_or_insert_with(HashMap::new)
            .entry(name)
            .or_insert_with(|| Box::leak(Box::new(Site::new(name))))
    }

    /// The name measurements are recorded under.
    ///
    /// ```
    /// assert_eq!(tch_scope::report::Site::new("a").name(), "a");
    /// ```
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The name as one word, for the trace's lock-free slots.
    pub(crate) fn name_ref(&'static self) -> &'static &'static str {
        &self.name
    }

    #[inline]
    pub(crate) fn id(&self) -> usize {
        match self.id.load(Ordering::Acquire) {
            0 => self.register(),
            n => n - 1,
        }
    }

    #[cold]
    fn register(&self) -> usize {
        let mut names = lock(&NAMES);
        // Checked again under the lock: another thread may have won.
        match self.id.load(Ordering::Acquire) {
            0 => {
                names.push(self.name);
                let id = names.len() - 1;
                self.id.store(id + 1, Ordering::Release);
                id
            }
            n => n - 1,
        }
    }
}

/// Running totals of one site's durations.
#[derive(Clone, Default)]
pub(crate) struct TimeStats {
    pub count: u64,
    pub panicked: u64,
    pub failed: u64,
    pub total_ns: u128,
    pub min_ns: u64,
    pub max_ns: u64,
    pub hist: Histogram,
}

impl TimeStats {
    fn add(&mut self, ns: u64, outcome: Outcome) {
        if self.count == 0 || ns < self.min_ns {
            self.min_ns = ns;
        }
        self.max_ns = self.max_ns.max(ns);
        self.count += 1;
        self.panicked += u64::from(outcome == Outcome::Panicked);
        self.failed += u64::from(outcome == Outcome::Failed);
        self.total_ns += u128::from(ns);
        self.hist.record(ns);
    }

    pub(crate) fn merge(&mut self, o: &TimeStats) {
        if o.count == 0 {
            return;
        }
        if self.count == 0 || o.min_ns < self.min_ns {
            self.min_ns = o.min_ns;
        }
        self.max_ns = self.max_ns.max(o.max_ns);
        self.count += o.count;
        self.panicked += o.panicked;
        self.failed += o.failed;
        self.total_ns += o.total_ns;
        self.hist.merge(&o.hist);
    }
}

type Slots = Vec<Option<TimeStats>>;

#[derive(Default)]
struct Shard {
    slots: Mutex<Slots>,
}

static SHARDS: Mutex<Vec<Arc<Shard>>> = Mutex::new(Vec::new());
static RETIRED: Mutex<Slots> = Mutex::new(Vec::new());

/// This thread's shard; on thread exit its totals move to `RETIRED`.
struct Local(Arc<Shard>);

impl Local {
    fn new() -> Self {
        let shard = Arc::new(Shard::default());
        lock(&SHARDS).push(shard.clone());
        Local(shard)
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        lock(&SHARDS).retain(|s| !Arc::ptr_eq(s, &self.0));
        let slots = std::mem::take(&mut *lock(&self.0.slots));
        merge_into(&mut lock(&RETIRED), &slots);
    }
}

thread_local! {
    static LOCAL: Local = Local::new();
}

fn add(slots: &mut Slots, id: usize, ns: u64, outcome: Outcome) {
    if slots.len() <= id {
        slots.resize_with(id + 1, || None);
    }
    slots[id]
        .get_or_insert_with(TimeStats::default)
        .add(ns, outcome);
}

fn merge_into(into: &mut Slots, from: &Slots) {
    for (id, s) in from.iter().enumerate() {
        if let Some(s) = s {
            if into.len() <= id {
                into.resize_with(id + 1, || None);
            }
            into[id].get_or_insert_with(TimeStats::default).merge(s);
        }
    }
}

/// Adds one duration to `site`'s totals.
#[inline]
pub(crate) fn record_time(site: &Site, ns: u64, outcome: Outcome) {
    let id = site.id();
    let done = LOCAL.try_with(|l| add(&mut lock(&l.0.slots), id, ns, outcome));
    if done.is_err() {
        // During thread teardown: straight into the retired totals.
        add(&mut lock(&RETIRED), id, ns, outcome);
    }
}

/// Every site's totals, merged across threads, grouped by name.
pub(crate) fn time_totals() -> Vec<(&'static str, TimeStats)> {
    let mut all = lock(&RETIRED).clone();
    for shard in lock(&SHARDS).iter() {
        merge_into(&mut all, &lock(&shard.slots));
    }
    let names = lock(&NAMES).clone();
    let mut by_name: Vec<(&'static str, TimeStats)> = Vec::new();
    for (id, s) in all.into_iter().enumerate() {
        let (Some(s), Some(&name)) = (s, names.get(id)) else {
            continue;
        };
        match by_name.iter_mut().find(|(n, _)| *n == name) {
            Some((_, t)) => t.merge(&s),
            None => by_name.push((name, s)),
        }
    }
    by_name.sort_by(|a, b| a.0.cmp(b.0));
    by_name
}

/// Forgets all time totals.
pub(crate) fn clear_times() {
    lock(&RETIRED).clear();
    for shard in lock(&SHARDS).iter() {
        lock(&shard.slots).clear();
    }
}
