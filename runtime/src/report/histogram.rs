//! A fixed-size log-linear histogram for streaming percentiles.
//!
//! Values below 16 have a bucket each; above, every power of two is split
//! into 16 equal buckets, so a bucket's midpoint is within 1/32 (≈3 %) of
//! any value in it. 720 buckets cover 0 to 2^48 ns (≈ 78 hours); larger
//! values land in the last bucket. Merging is adding counts, so per-thread
//! histograms combine exactly. [`SharedHistogram`] is the same buckets in
//! atomics, written by one thread and read by any.

use std::sync::atomic::{AtomicU32, Ordering};

const SUB: u32 = 16;
const LINEAR: u64 = 16;
const MAX_EXP: u32 = 47;
pub(crate) const BUCKETS: usize = (LINEAR as usize) + ((MAX_EXP - 3) * SUB) as usize;

#[derive(Clone)]
pub(crate) struct Histogram {
    counts: Box<[u32; BUCKETS]>,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: Box::new([0; BUCKETS]),
        }
    }
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
        let c = &mut self.counts[index(v)];
        *c = c.saturating_add(1);
    }

    pub(crate) fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    /// The `q`-quantile (0 < q <= 1) as the midpoint of its bucket, or
    /// `None` when empty.
    pub(crate) fn quantile(&self, q: f64) -> Option<u64> {
        let total: u64 = self.counts.iter().map(|&c| u64::from(c)).sum();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                let (low, width) = bounds(i);
                return Some(low + width / 2);
            }
        }
        None
    }
}

/// A [`Histogram`] that one thread writes with plain loads and stores (no
/// lock, no read-modify-write) and any thread may read.
pub(crate) struct SharedHistogram {
    counts: [AtomicU32; BUCKETS],
}

impl Default for SharedHistogram {
    fn default() -> Self {
        Self {
            counts: std::array::from_fn(|_| AtomicU32::new(0)),
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
        let mut h = Histogram::default();
        for (to, from) in h.counts.iter_mut().zip(&self.counts) {
            *to = from.load(Ordering::Relaxed);
        }
        h
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
}
