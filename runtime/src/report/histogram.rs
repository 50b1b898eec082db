//! A fixed-size log-linear histogram for streaming percentiles.
//!
//! Values below 16 have a bucket each; above, every power of two is split
//! into 16 equal buckets, so a bucket's midpoint is within 1/32 (≈3 %) of
//! any value in it. 720 buckets cover 0 to 2^48 ns (≈ 78 hours); larger
//! values land in the last bucket. Merging is adding counts, so per-thread
//! histograms combine exactly. [`SharedHistogram`] is the same buckets in
//! atomics, written by one thread and read by any.
//!
//! Counts are `u64`: a site at 10^9 runs a second fills a bucket after
//! ≈ 580 years (`u32` buckets saturated after ≈ 72 minutes at 10^6 runs a
//! second, and the percentiles drifted from then on). The plain
//! [`Histogram`] a report merges keeps only its non-empty buckets: a
//! report of 100 000 names copies a few dozen buckets per name, not 720.

use std::sync::atomic::{AtomicU64, Ordering};

const SUB: u32 = 16;
const LINEAR: u64 = 16;
const MAX_EXP: u32 = 47;
pub(crate) const BUCKETS: usize = (LINEAR as usize) + ((MAX_EXP - 3) * SUB) as usize;

/// Counts per bucket, non-empty buckets only, sorted by bucket index.
#[derive(Clone, Default, Debug, PartialEq, Eq)]
pub(crate) struct Histogram {
    counts: Vec<(u16, u64)>,
}

fn index(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= 4
    if exp > MAX_EXP {
        return BUCKETS - 1;
    }
    let sub = ((v >> (exp - 4)) & u64::from(SUB - 1)) as usize;
    LINEAR as usize + ((exp - 4) * SUB) as usize + sub
}

/// Lower bound and width of bucket `i`.
fn bounds(i: usize) -> (u64, u64) {
    if i < LINEAR as usize {
        return (i as u64, 1);
    }
    let j = i - LINEAR as usize;
    let exp = (j / SUB as usize) as u32 + 4;
    let sub = (j % SUB as usize) as u64;
    let width = 1u64 << (exp - 4);
    ((LINEAR + sub) * width, width)
}

impl Histogram {
    pub(crate) fn record(&mut self, v: u64) {
        self.add(index(v), 1);
    }

    /// Adds `n` to bucket `i`.
    fn add(&mut self, i: usize, n: u64) {
        let i = i as u16;
        match self.counts.binary_search_by_key(&i, |&(j, _)| j) {
            Ok(k) => self.counts[k].1 = self.counts[k].1.saturating_add(n),
            Err(k) => self.counts.insert(k, (i, n)),
        }
    }

    pub(crate) fn merge(&mut self, other: &Histogram) {
        if self.counts.is_empty() {
            self.counts.clone_from(&other.counts);
            return;
        }
        // Both sorted: one pass.
        let mut out = Vec::with_capacity(self.counts.len() + other.counts.len());
        let (mut a, mut b) = (
            self.counts.iter().peekable(),
            other.counts.iter().peekable(),
        );
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(&&(i, x)), Some(&&(j, y))) if i == j => {
                    a.next();
                    b.next();
                    (i, x.saturating_add(y))
                }
                (Some(&&(i, _)), Some(&&(j, _))) if j < i => *b.next().expect("peeked"),
                (Some(_), _) => *a.next().expect("peeked"),
                (None, Some(_)) => *b.next().expect("peeked"),
                (None, None) => break,
            };
            out.push(next);
        }
        self.counts = out;
    }

    /// The `q`-quantile (0 < q <= 1) as the midpoint of its bucket, or
    /// `None` when empty.
    pub(crate) fn quantile(&self, q: f64) -> Option<u64> {
        let total = self
            .counts
            .iter()
            .fold(0u64, |t, &(_, c)| t.saturating_add(c));
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0u64;
        for &(i, c) in &self.counts {
            seen = seen.saturating_add(c);
            if seen >= rank {
                let (low, width) = bounds(usize::from(i));
                return Some(low + width / 2);
            }
        }
        None
    }
}

/// A [`Histogram`] that one thread writes with plain loads and stores (no
/// lock, no read-modify-write) and any thread may read.
pub(crate) struct SharedHistogram {
    counts: [AtomicU64; BUCKETS],
}

impl Default for SharedHistogram {
    fn default() -> Self {
        Self {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl SharedHistogram {
    /// Counts `v`. Only the owning thread calls this: a load and a store
    /// are an increment only without a second writer.
    #[inline]
    pub(crate) fn record(&self, v: u64) {
        let c = &self.counts[index(v)];
        c.store(
            c.load(Ordering::Relaxed).saturating_add(1),
            Ordering::Relaxed,
        );
    }

    /// Zeroes every bucket (owner only).
    pub(crate) fn zero(&self) {
        for c in &self.counts {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// A copy, as the counts read now.
    pub(crate) fn load(&self) -> Histogram {
        let counts = self
            .counts
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let n = c.load(Ordering::Relaxed);
                (n > 0).then_some((i as u16, n))
            })
            .collect();
        Histogram { counts }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_range() {
        let mut next = 0;
        for i in 0..BUCKETS {
            let (low, width) = bounds(i);
            assert_eq!(low, next, "bucket {i}");
            assert_eq!(index(low), i);
            assert_eq!(index(low + width - 1), i);
            next = low + width;
        }
    }

    #[test]
    fn quantiles_are_within_three_percent() {
        let mut h = Histogram::default();
        for v in 1..=10_000u64 {
            h.record(v * 1000);
        }
        for (q, exact) in [(0.5, 5_000_000.0), (0.95, 9_500_000.0), (1.0, 10_000_000.0)] {
            let got = h.quantile(q).unwrap() as f64;
            assert!((got - exact).abs() / exact < 0.03, "q{q}: {got} vs {exact}");
        }
    }

    #[test]
    fn merge_adds_counts() {
        let (mut a, mut b) = (Histogram::default(), Histogram::default());
        a.record(10);
        b.record(1_000_000);
        b.record(1_000_000);
        a.merge(&b);
        assert_eq!(a.quantile(0.3), Some(10));
        assert!(a.quantile(0.9).unwrap().abs_diff(1_000_000) < 40_000);
        assert_eq!(Histogram::default().quantile(0.5), None);
    }

    #[test]
    fn a_shared_histogram_reads_as_the_plain_one() {
        let (mut plain, shared) = (Histogram::default(), SharedHistogram::default());
        for v in [0, 3, 17, 1_000, 1_000, 123_456_789, u64::MAX] {
            plain.record(v);
            shared.record(v);
        }
        assert_eq!(shared.load().counts, plain.counts);
        shared.zero();
        assert_eq!(shared.load().quantile(0.5), None);
    }

    /// A bucket past `u32::MAX` keeps counting, in the shared
    /// histogram, in a merge and in the quantiles.
    #[test]
    fn buckets_count_past_u32_max() {
        let shared = SharedHistogram::default();
        let i = index(1_000);
        shared.counts[i].store(u64::from(u32::MAX), Ordering::Relaxed);
        shared.record(1_000);
        shared.record(1_000);
        let h = shared.load();
        assert_eq!(h.counts, vec![(i as u16, u64::from(u32::MAX) + 2)]);
        let mut merged = h.clone();
        merged.merge(&h);
        assert_eq!(merged.counts[0].1, 2 * (u64::from(u32::MAX) + 2));
        // One slower run among 2^33 at 1 µs: the percentiles stay at 1 µs.
        merged.record(1_000_000);
        assert!(merged.quantile(0.95).unwrap().abs_diff(1_000) < 40);
        assert!(merged.quantile(1.0).unwrap().abs_diff(1_000_000) < 40_000);
    }

    #[test]
    fn merge_of_interleaved_buckets_keeps_them_sorted() {
        let (mut a, mut b) = (Histogram::default(), Histogram::default());
        for v in [1, 100, 10_000] {
            a.record(v);
        }
        for v in [50, 100, 1_000_000] {
            b.record(v);
        }
        a.merge(&b);
        let idx: Vec<u16> = a.counts.iter().map(|&(i, _)| i).collect();
        assert!(idx.windows(2).all(|w| w[0] < w[1]), "{idx:?}");
        assert_eq!(a.counts.iter().map(|&(_, c)| c).sum::<u64>(), 6);
        assert_eq!(a.counts[2], (index(100) as u16, 2));
    }
}
