//! Running totals of durations, per site id: what a report merges.

use super::Outcome;
use super::histogram::Histogram;

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
    /// Counts one duration.
    pub(crate) fn add(&mut self, ns: u64, outcome: Outcome) {
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

    /// Adds `o`'s counts (the per-thread totals of one site combine exactly).
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

/// Totals indexed by site id (`None`: nothing recorded there).
pub(crate) type Slots = Vec<Option<TimeStats>>;

/// Adds one duration to site `id`'s totals.
pub(crate) fn add(slots: &mut Slots, id: usize, ns: u64, outcome: Outcome) {
    if slots.len() <= id {
        slots.resize_with(id + 1, || None);
    }
    slots[id]
        .get_or_insert_with(TimeStats::default)
        .add(ns, outcome);
}

/// Adds `s` into site `id`'s totals.
pub(crate) fn merge_at(into: &mut Slots, id: usize, s: &TimeStats) {
    if into.len() <= id {
        into.resize_with(id + 1, || None);
    }
    into[id].get_or_insert_with(TimeStats::default).merge(s);
}
