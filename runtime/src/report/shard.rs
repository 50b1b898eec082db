//! One thread's running totals: written by that thread without locks, read
//! by whoever reads the report.
//!
//! Only the owning thread writes a shard, with plain loads and stores (no
//! lock and no read-modify-write: an uncontended mutex alone cost a `timed`
//! exit ≈16 ns on the bench machine). Readers load the same atomics, so a
//! report read while a thread records sees every counter whole, though a
//! run being recorded at that moment may show in some fields and not yet
//! in others. [`reset`] (any thread) bumps a process-wide epoch: a shard of
//! an older epoch reads as empty, and its owner zeroes it before its next
//! write.
//!
//! A wall-clock run is added one run late ([`Shard::push_run`]): its raw
//! clock ticks wait in the shard's `pending` slot, and the thread's next
//! run folds them into their site's totals. The conversion to nanoseconds,
//! the histogram's bucket and the minimum and maximum all depend on the
//! clock reading that ends the run; done at once, they wait for that
//! reading (a `rdtsc` takes ≈ 11 ns to come back on the bench VM), done
//! one run later they overlap with it. Readers add the pending run
//! themselves: they read `pending` first, with the site's count at the
//! time the run went there (`base`), then the totals; a count past `base`
//! means the run was folded meanwhile. So a run, once it shows, is counted
//! exactly once in every later read (a report's counts never go back).
//! Every change to a cell folds the pending run first, so the first change
//! to the pending run's cell is its fold.

use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicU64, AtomicUsize, Ordering, fence};

use super::Outcome;
use super::histogram::SharedHistogram;
use super::totals::{Slots, TimeStats, merge_at};

/// Site ids per page of a shard's directory.
const PAGE: usize = 64;
/// Site ids a shard keeps; a program with more timed call sites than this
/// records the rest under the registry's lock.
const SITES: usize = PAGE * 1024;

/// Bumped by [`reset`]; a shard holds totals of the epoch it last saw.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// One site's totals in one shard.
#[derive(Default)]
struct Cell {
    count: AtomicU64,
    panicked: AtomicU64,
    failed: AtomicU64,
    total_ns: AtomicU64,
    min_ns: AtomicU64,
    max_ns: AtomicU64,
    hist: SharedHistogram,
}

/// A load and a store: an increment where only one thread writes.
#[inline]
fn put(a: &AtomicU64, f: impl FnOnce(u64) -> u64) {
    a.store(f(a.load(Ordering::Relaxed)), Ordering::Relaxed);
}

impl Cell {
    /// Owner only.
    #[inline(always)]
    fn add(&self, ns: u64, outcome: Outcome) {
        let count = self.count.load(Ordering::Relaxed);
        if count == 0 || ns < self.min_ns.load(Ordering::Relaxed) {
            self.min_ns.store(ns, Ordering::Relaxed);
        }
        if ns > self.max_ns.load(Ordering::Relaxed) {
            self.max_ns.store(ns, Ordering::Relaxed);
        }
        match outcome {
            Outcome::Completed => {}
            Outcome::Panicked => put(&self.panicked, |n| n + 1),
            Outcome::Failed => put(&self.failed, |n| n + 1),
        }
        put(&self.total_ns, |t| t.saturating_add(ns));
        self.hist.record(ns);
        // Last, with Release: a reader that sees this run counted sees its
        // minimum, maximum and total too.
        self.count.store(count + 1, Ordering::Release);
    }

    /// Owner only.
    fn zero(&self) {
        for a in [
            &self.count,
            &self.panicked,
            &self.failed,
            &self.total_ns,
            &self.min_ns,
            &self.max_ns,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        self.hist.zero();
    }

    fn load(&self) -> Option<TimeStats> {
        let count = self.count.load(Ordering::Acquire);
        (count > 0).then(|| TimeStats {
            count,
            panicked: self.panicked.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            total_ns: u128::from(self.total_ns.load(Ordering::Relaxed)),
            min_ns: self.min_ns.load(Ordering::Relaxed),
            max_ns: self.max_ns.load(Ordering::Relaxed),
            hist: self.hist.load(),
        })
    }
}

/// `PAGE` cells, each made on its site's first run in this thread.
struct Page([AtomicPtr<Cell>; PAGE]);

/// One thread's totals.
pub(crate) struct Shard {
    /// The epoch these totals belong to.
    epoch: AtomicU64,
    /// Pages, each made on first use (inline: one pointer less to follow
    /// on the hot path).
    pages: [AtomicPtr<Page>; SITES / PAGE],
    /// The last wall-clock run, not yet in its site's totals.
    pending: Pending,
}

/// A run waiting to be folded (see the [module docs](self)). `seq` is odd
/// while it holds one, and changes whenever the run in it does.
#[derive(Default)]
struct Pending {
    seq: AtomicU64,
    id: AtomicUsize,
    /// Raw clock ticks (`end - start`, wrapping: "negative" reads as 0).
    ticks: AtomicU64,
    outcome: AtomicU8,
    /// The site's count when the run came here.
    base: AtomicU64,
    /// The site's cell (owner only: its fold needs no lookup).
    cell: AtomicPtr<Cell>,
}

impl Shard {
    pub(crate) fn new() -> Self {
        Self {
            epoch: AtomicU64::new(EPOCH.load(Ordering::Acquire)),
            pages: std::array::from_fn(|_| AtomicPtr::default()),
            pending: Pending::default(),
        }
    }

    /// Records a wall-clock run of site `id` that took `ticks` raw clock
    /// ticks: it waits in `pending`, and the previous pending run is added
    /// to its site's totals now. `false` (nothing done) for an id past
    /// [`SITES`]. Only the owning thread calls this.
    #[inline(always)]
    pub(crate) fn push_run(&self, id: usize, ticks: u64, outcome: Outcome) -> bool {
        if id >= SITES {
            return false;
        }
        self.renew_and_fold();
        let c = self.cell(id);
        let p = &self.pending;
        let seq = p.seq.load(Ordering::Relaxed);
        p.id.store(id, Ordering::Relaxed);
        p.ticks.store(ticks, Ordering::Relaxed);
        p.outcome.store(outcome.to_u8(), Ordering::Relaxed);
        p.base
            .store(c.count.load(Ordering::Relaxed), Ordering::Relaxed);
        p.cell.store(ptr::from_ref(c).cast_mut(), Ordering::Relaxed);
        // Release: a reader that sees the new sequence sees the run.
        p.seq.store(seq + 1, Ordering::Release);
        true
    }

    /// Adds one duration to site `id`'s totals; `false` (nothing done) for
    /// an id past [`SITES`]. Only the owning thread calls this.
    #[inline(always)]
    pub(crate) fn add(&self, id: usize, ns: u64, outcome: Outcome) -> bool {
        if id >= SITES {
            return false;
        }
        self.renew_and_fold();
        self.cell(id).add(ns, outcome);
        true
    }

    /// Before any change to a cell: the totals of a reset zeroed, and the
    /// pending run folded (owner only).
    #[inline(always)]
    fn renew_and_fold(&self) {
        let epoch = EPOCH.load(Ordering::Acquire);
        if self.epoch.load(Ordering::Relaxed) != epoch {
            self.renew(epoch);
        }
        let p = &self.pending;
        let seq = p.seq.load(Ordering::Relaxed);
        if seq & 1 == 1 {
            let ticks = p.ticks.load(Ordering::Relaxed);
            let outcome = Outcome::from_u8(p.outcome.load(Ordering::Relaxed));
            // SAFETY: the cell of the pending run, made by this thread; a
            // cell lives as long as its shard.
            let c = unsafe { &*p.cell.load(Ordering::Relaxed) };
            c.add(crate::clock::ticks_nanos(ticks), outcome);
            // Empty; Release: a reader that sees it empty sees the fold.
            p.seq.store(seq + 1, Ordering::Release);
            // And no store of the next run is seen before it (a seqlock's
            // writer; free on x86).
            fence(Ordering::Release);
        }
    }

    /// Site `id`'s cell (`id < SITES`), made on first use. Owner only.
    #[inline(always)]
    fn cell(&self, id: usize) -> &Cell {
        let page = &self.pages[id / PAGE];
        // The owner made every pointer it loads here: Relaxed suffices.
        let mut p = page.load(Ordering::Relaxed);
        if p.is_null() {
            p = make(page, || Page(std::array::from_fn(|_| AtomicPtr::default())));
        }
        // SAFETY: a page lives as long as its shard (freed in `drop`).
        let slot = unsafe { &(*p).0[id % PAGE] };
        let mut c = slot.load(Ordering::Relaxed);
        if c.is_null() {
            c = make(slot, Cell::default);
        }
        // SAFETY: as the page.
        unsafe { &*c }
    }

    /// Zeroes this shard's totals for `epoch` (owner only).
    #[cold]
    fn renew(&self, epoch: u64) {
        self.cells(|_, c| c.zero());
        // The pending run belongs to the old epoch too.
        let seq = self.pending.seq.load(Ordering::Relaxed);
        self.pending.seq.store(seq + (seq & 1), Ordering::Release);
        // Release: a reader that sees the new epoch sees the zeroes.
        self.epoch.store(epoch, Ordering::Release);
    }

    /// Adds this shard's totals into `into` (nothing if a reset came since
    /// its last write).
    pub(crate) fn load_into(&self, into: &mut Slots) {
        if self.epoch.load(Ordering::Acquire) != EPOCH.load(Ordering::Acquire) {
            return;
        }
        // The pending run first, then the totals (see the module docs).
        let pending = self.pending();
        let mut folded = false;
        self.cells(|id, c| {
            if let Some(s) = c.load() {
                if let Some((pid, _, _, base)) = pending {
                    folded |= id == pid && s.count > base;
                }
                merge_at(into, id, &s);
            }
        });
        if let (Some((id, ticks, outcome, _)), false) = (pending, folded) {
            let mut one = TimeStats::default();
            one.add(crate::clock::ticks_nanos(ticks), outcome);
            merge_at(into, id, &one);
        }
    }

    /// The pending run (site, ticks, outcome, base count), if one was
    /// there and did not change while read.
    fn pending(&self) -> Option<(usize, u64, Outcome, u64)> {
        let p = &self.pending;
        let seq = p.seq.load(Ordering::Acquire);
        if seq & 1 == 0 {
            return None;
        }
        let run = (
            p.id.load(Ordering::Relaxed),
            p.ticks.load(Ordering::Relaxed),
            Outcome::from_u8(p.outcome.load(Ordering::Relaxed)),
            p.base.load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        (p.seq.load(Ordering::Relaxed) == seq).then_some(run)
    }

    fn cells(&self, mut f: impl FnMut(usize, &Cell)) {
        for (i, page) in self.pages.iter().enumerate() {
            // SAFETY: null, or a page that lives as long as the shard.
            let Some(page) = (unsafe { page.load(Ordering::Acquire).as_ref() }) else {
                continue;
            };
            for (j, c) in page.0.iter().enumerate() {
                // SAFETY: as the page.
                if let Some(c) = unsafe { c.load(Ordering::Acquire).as_ref() } {
                    f(i * PAGE + j, c);
                }
            }
        }
    }
}

/// Makes the value behind an empty pointer, published with Release so a
/// reader's Acquire load sees it whole.
#[cold]
fn make<T>(at: &AtomicPtr<T>, new: impl FnOnce() -> T) -> *mut T {
    let p = Box::into_raw(Box::new(new()));
    at.store(p, Ordering::Release);
    p
}

impl Drop for Shard {
    fn drop(&mut self) {
        for page in &mut self.pages {
            let p = std::mem::replace(page.get_mut(), ptr::null_mut());
            if p.is_null() {
                continue;
            }
            // SAFETY: made by `make` from a Box, and now unreachable.
            let mut page = unsafe { Box::from_raw(p) };
            for c in &mut page.0 {
                let c = *c.get_mut();
                if !c.is_null() {
                    // SAFETY: as the page.
                    drop(unsafe { Box::from_raw(c) });
                }
            }
        }
    }
}

/// Forgets every shard's totals: they read as empty from now on, and each
/// owner zeroes its own before its next write.
pub(crate) fn reset() {
    EPOCH.fetch_add(1, Ordering::AcqRel);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::lock;
    use std::sync::{Arc, Mutex, MutexGuard};

    /// A reset empties every shard: these tests take turns.
    fn serial() -> MutexGuard<'static, ()> {
        static LOCK: Mutex<()> = Mutex::new(());
        lock(&LOCK)
    }

    fn read(s: &Shard, id: usize) -> Option<TimeStats> {
        let mut all = Slots::new();
        s.load_into(&mut all);
        all.get(id).cloned().flatten()
    }

    #[test]
    fn counts_as_the_plain_totals_do() {
        let _serial = serial();
        let s = Shard::new();
        let mut plain = TimeStats::default();
        for (ns, o) in [
            (50, Outcome::Completed),
            (7, Outcome::Panicked),
            (900, Outcome::Failed),
            (60, Outcome::Completed),
        ] {
            assert!(s.add(3, ns, o));
            plain.add(ns, o);
        }
        let got = read(&s, 3).unwrap();
        assert_eq!(
            (got.count, got.panicked, got.failed, got.total_ns),
            (4, 1, 1, 1017)
        );
        assert_eq!((got.min_ns, got.max_ns), (plain.min_ns, plain.max_ns));
        assert_eq!(got.hist.quantile(0.5), plain.hist.quantile(0.5));
        assert!(read(&s, 2).is_none(), "a site never run reads as nothing");
        assert!(s.add(SITES - 1, 1, Outcome::Completed));
        assert!(
            !s.add(SITES, 1, Outcome::Completed),
            "past SITES: the caller's"
        );
    }

    #[test]
    fn a_reader_on_another_thread_sees_whole_counts_while_the_owner_writes() {
        let _serial = serial();
        let s = Arc::new(Shard::new());
        let owner = {
            let s = s.clone();
            std::thread::spawn(move || {
                for _ in 0..200_000 {
                    s.add(0, 10, Outcome::Completed);
                }
            })
        };
        let mut last = 0;
        while !owner.is_finished() {
            if let Some(t) = read(&s, 0) {
                assert!(t.count >= last, "counts only grow");
                assert!(t.total_ns >= 10 * u128::from(t.count), "the total keeps up");
                last = t.count;
            }
        }
        owner.join().unwrap();
        assert_eq!(read(&s, 0).unwrap().count, 200_000);
    }

    #[test]
    fn a_pending_run_counts_once_before_and_after_it_is_folded() {
        let _serial = serial();
        let s = Shard::new();
        assert!(s.push_run(2, 1_000, Outcome::Completed));
        let one = read(&s, 2).unwrap();
        assert_eq!(
            (one.count, one.total_ns),
            (1, u128::from(crate::clock::ticks_nanos(1_000)))
        );
        assert!(s.push_run(2, 3_000, Outcome::Failed));
        assert!(s.push_run(5, 10, Outcome::Completed));
        let two = read(&s, 2).unwrap();
        assert_eq!((two.count, two.failed), (2, 1), "both folded, none twice");
        assert_eq!(read(&s, 5).unwrap().count, 1, "the pending one");
        assert!(s.add(5, 7, Outcome::Completed), "a run recorded at once");
        assert_eq!(read(&s, 5).unwrap().count, 2);
        assert!(!s.push_run(SITES, 1, Outcome::Completed));
        assert_eq!(
            crate::clock::ticks_nanos(u64::MAX - 5),
            0,
            "a clock that went back"
        );
    }

    #[test]
    fn a_reader_never_counts_a_run_twice_while_the_owner_folds() {
        let _serial = serial();
        let s = Arc::new(Shard::new());
        const RUNS: u64 = 200_000;
        let owner = {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..RUNS {
                    s.push_run((i % 3) as usize, 10, Outcome::Completed);
                }
            })
        };
        let mut last = 0;
        while !owner.is_finished() {
            let mut all = Slots::new();
            s.load_into(&mut all);
            let n: u64 = all.iter().flatten().map(|t| t.count).sum();
            assert!(n <= RUNS, "counted twice: {n}");
            assert!(n >= last, "counts never go back: {n} after {last}");
            last = n;
        }
        owner.join().unwrap();
        let mut all = Slots::new();
        s.load_into(&mut all);
        assert_eq!(all.iter().flatten().map(|t| t.count).sum::<u64>(), RUNS);
    }

    #[test]
    fn a_reset_empties_the_shard_and_the_owner_starts_again_from_zero() {
        let _serial = serial();
        let s = Shard::new();
        s.add(1, 5, Outcome::Completed);
        s.push_run(1, 5, Outcome::Completed);
        reset();
        assert!(read(&s, 1).is_none(), "empty right after the reset");
        s.add(1, 7, Outcome::Completed);
        let t = read(&s, 1).unwrap();
        assert_eq!((t.count, t.total_ns, t.min_ns, t.max_ns), (1, 7, 7, 7));
    }
}
