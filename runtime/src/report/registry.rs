//! Where measurements accumulate: per call site, per thread, merged on read.
//!
//! The hot path (one `timed` exit) writes only its own thread's shard, and
//! without a lock (see [`super::shard`]); the call site's id is assigned
//! once and cached in the site's static, so no name is hashed either. A
//! thread's shard is merged into the retired totals when the thread exits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::Outcome;
use super::shard::{self, Shard};
use super::totals::{Slots, TimeStats, add};

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

static SHARDS: Mutex<Vec<Arc<Shard>>> = Mutex::new(Vec::new());
static RETIRED: Mutex<Slots> = Mutex::new(Vec::new());

/// This thread's shard; on thread exit its totals move to `RETIRED`.
struct Local(Arc<Shard>);

impl Local {
    fn new() -> Self {
        let shard = Arc::new(Shard::new());
        lock(&SHARDS).push(shard.clone());
        Local(shard)
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        lock(&SHARDS).retain(|s| !Arc::ptr_eq(s, &self.0));
        // Under RETIRED's lock, as `clear_times` bumps the epoch: a reset
        // either comes first (the shard reads as empty) or clears these.
        self.0.load_into(&mut lock(&RETIRED));
    }
}

thread_local! {
    static LOCAL: Local = Local::new();
}

/// Adds one duration to `site`'s totals.
#[inline]
pub(crate) fn record_time(site: &Site, ns: u64, outcome: Outcome) {
    let id = site.id();
    let done = LOCAL.try_with(|l| l.0.add(id, ns, outcome));
    if done != Ok(true) {
        // During thread teardown, or a site past what a shard holds:
        // straight into the retired totals.
        add(&mut lock(&RETIRED), id, ns, outcome);
    }
}

/// Every site's totals, merged across threads, grouped by name.
pub(crate) fn time_totals() -> Vec<(&'static str, TimeStats)> {
    let mut all = lock(&RETIRED).clone();
    for shard in lock(&SHARDS).iter() {
        shard.load_into(&mut all);
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
    let mut retired = lock(&RETIRED);
    shard::reset();
    retired.clear();
}
