//! Where measurements accumulate: per call site, per thread, merged on read.
//!
//! The hot path (one `timed` exit) writes only its own thread's shard, and
//! without a lock (see [`super::shard`]); the call site's id is assigned
//! once and cached in the site's static, so no name is hashed either. A
//! thread's shard is merged into the retired totals when the thread exits.
//!
//! Id 0 is the row [`OTHER`]: a site whose name came past the bound on
//! distinct names ([`super::names`]) is given it at its first run.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::Outcome;
use super::names::{self, OTHER};
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

/// Each id's row name (id 0: [`OTHER`]).
static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
/// The id of the row [`OTHER`].
const OTHER_ID: usize = 0;
/// Where [`Site::named`] sends names past the bound.
static OTHER_SITE: Site = Site {
    name: OTHER,
    id: AtomicUsize::new(OTHER_ID + 1),
};

pub(crate) use crate::sync::lock;

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
    /// code that has no `static` of its own). Past the bound on distinct
    /// names ([`set_name_limit`](super::set_name_limit)), a name not seen
    /// before gets the one shared site named [`OTHER`] (`"other"`): no
    /// site is made for it.
    ///
    /// ```
    /// assert_eq!(tch_scope::report::Site::named("epoch").name(), "epoch");
    /// ```
    pub fn named(name: &'static str) -> &'static Site {
        static BY_NAME: Mutex<Option<HashMap<&'static str, &'static Site>>> = Mutex::new(None);
        {
            let mut map = lock(&BY_NAME);
            let map = map.get_or_insert_with(HashMap::new);
            if let Some(site) = map.get(name) {
                return site;
            }
            if names::admit(name) {
                return map
                    .entry(name)
                    .or_insert_with(|| Box::leak(Box::new(Site::new(name))));
            }
        }
        names::refused("timed", name);
        &OTHER_SITE
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

    /// The name of the row this site's runs count in: its own, or
    /// [`OTHER`] when it came past the bound on distinct names.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn row_name(&self) -> &'static str {
        if self.id() == OTHER_ID {
            OTHER
        } else {
            self.name
        }
    }

    #[cold]
    fn register(&self) -> usize {
        let (id, admitted) = {
            let mut names = lock(&NAMES);
            if names.is_empty() {
                names.push(OTHER);
            }
            // Checked again under the lock: another thread may have won.
            match self.id.load(Ordering::Acquire) {
                0 => {
                    let admitted = names::admit(self.name);
                    let id = if admitted {
                        names.push(self.name);
                        names.len() - 1
                    } else {
                        OTHER_ID
                    };
                    self.id.store(id + 1, Ordering::Release);
                    (id, admitted)
                }
                n => return n - 1,
            }
        };
        if !admitted {
            names::refused("timed", self.name);
        }
        id
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
        // No run after this goes to the shard.
        SHARD.set(std::ptr::null());
        lock(&SHARDS).retain(|s| !Arc::ptr_eq(s, &self.0));
        // Under RETIRED's lock, as `clear_times` bumps the epoch: a reset
        // either comes first (the shard reads as empty) or clears these.
        self.0.load_into(&mut lock(&RETIRED));
    }
}

thread_local! {
    static LOCAL: Local = Local::new();
    /// `LOCAL`'s shard while it lives, else null: the hot path's one
    /// thread-local, a plain cell (no destructor, so no registration check
    /// per access).
    static SHARD: Cell<*const Shard> = const { Cell::new(std::ptr::null()) };
}

/// Adds one duration to `site`'s totals.
#[inline]
pub(crate) fn record_time(site: &Site, ns: u64, outcome: Outcome) {
    let id = site.id();
    let shard = SHARD.get();
    // SAFETY: non-null only while `LOCAL` holds the shard on this thread.
    if shard.is_null() || !unsafe { &*shard }.add(id, ns, outcome) {
        record_time_slow(id, ns, outcome);
    }
}

/// Adds one wall-clock run of `site` that took `ticks` raw clock ticks
/// (`crate::clock`; wrapping, a "negative" one reads as 0), one run late
/// (see `Shard::push_run`).
#[inline]
pub(crate) fn record_run(site: &Site, ticks: u64, outcome: Outcome) {
    let id = site.id();
    let shard = SHARD.get();
    // SAFETY: non-null only while `LOCAL` holds the shard on this thread.
    if shard.is_null() || !unsafe { &*shard }.push_run(id, ticks, outcome) {
        record_time_slow(id, crate::clock::ticks_nanos(ticks), outcome);
    }
}

/// The first run of the thread, or one during its teardown, or of a site
/// past what a shard holds.
#[cold]
#[inline(never)]
fn record_time_slow(id: usize, ns: u64, outcome: Outcome) {
    let done = LOCAL.try_with(|l| {
        SHARD.set(Arc::as_ptr(&l.0));
        l.0.add(id, ns, outcome)
    });
    if done != Ok(true) {
        // During thread teardown, or a site past what a shard holds:
        // straight into the retired totals.
        add(&mut lock(&RETIRED), id, ns, outcome);
    }
}

/// Every site's totals, merged across threads, grouped by name (a hash
/// map, then one sort: O(n log n) in names).
pub(crate) fn time_totals() -> Vec<(&'static str, TimeStats)> {
    let mut all = lock(&RETIRED).clone();
    for shard in lock(&SHARDS).iter() {
        shard.load_into(&mut all);
    }
    let names = lock(&NAMES).clone();
    let mut by_name: HashMap<&'static str, TimeStats> = HashMap::new();
    for (id, s) in all.into_iter().enumerate() {
        let name = if id == OTHER_ID {
            OTHER
        } else {
            match names.get(id) {
                Some(&name) => name,
                None => continue,
            }
        };
        let Some(s) = s else {
            continue;
        };
        match by_name.entry(name) {
            std::collections::hash_map::Entry::Occupied(mut t) => t.get_mut().merge(&s),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(s);
            }
        }
    }
    let mut by_name: Vec<(&'static str, TimeStats)> = by_name.into_iter().collect();
    by_name.sort_unstable_by(|a, b| a.0.cmp(b.0));
    by_name
}

/// Forgets all time totals.
pub(crate) fn clear_times() {
    let mut retired = lock(&RETIRED);
    shard::reset();
    retired.clear();
}
