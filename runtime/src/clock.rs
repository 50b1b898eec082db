//! The clock of `timed`, the memory scopes and the trace: the CPU's
//! time-stamp counter through `quanta`, calibrated once against the OS's
//! monotonic clock (quanta falls back to that clock where the TSC is not
//! invariant). One read is a `rdtsc`, a fraction of `Instant::now()`.
//!
//! Where quanta reads the TSC (x86_64, checked once), [`now`] reads it
//! inline and [`nanos`] scales by a factor taken from quanta's
//! calibration: no call and no `OnceLock` check per reading, which a
//! span's floor (two readings) feels.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

fn clock() -> &'static quanta::Clock {
    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    // Calibration runs here, before the first reading is taken, so it is
    // never billed to a scope.
    CLOCK.get_or_init(quanta::Clock::new)
}

/// How readings are taken: not yet known, the TSC inline, or quanta.
const UNKNOWN: u8 = 0;
const TSC: u8 = 1;
const QUANTA: u8 = 2;
static SOURCE: AtomicU8 = AtomicU8::new(UNKNOWN);
/// Nanoseconds per 2^[`SHIFT`] TSC ticks, from quanta's calibration.
static SCALE: AtomicU64 = AtomicU64::new(0);
const SHIFT: u32 = 40;

/// A raw reading; only differences of two, through [`nanos`], mean time.
#[inline]
pub(crate) fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if SOURCE.load(Ordering::Relaxed) == TSC {
        // SAFETY: `rdtsc` exists on every x86_64 CPU.
        return unsafe { std::arch::x86_64::_rdtsc() };
    }
    now_slow()
}

#[cold]
#[inline(never)]
fn now_slow() -> u64 {
    if source() == TSC {
        return now();
    }
    clock().raw()
}

/// Nanoseconds from `start` to `end` (0 if `end` is not later).
#[inline]
pub(crate) fn nanos(start: u64, end: u64) -> u64 {
    if SOURCE.load(Ordering::Relaxed) == TSC {
        if end <= start {
            return 0;
        }
        let scale = u128::from(SCALE.load(Ordering::Relaxed));
        return u64::try_from((u128::from(end - start) * scale) >> SHIFT).unwrap_or(u64::MAX);
    }
    clock().delta_as_nanos(start, end)
}

/// Nanoseconds of `ticks`, a wrapping difference `end - start` of two
/// readings: one that wrapped ("negative", the clock went back) is 0.
#[inline]
pub(crate) fn ticks_nanos(ticks: u64) -> u64 {
    if ticks > i64::MAX as u64 {
        0
    } else {
        nanos(0, ticks)
    }
}

/// Where readings come from, found out (and quanta calibrated) on the
/// first call.
fn source() -> u8 {
    let s = SOURCE.load(Ordering::Acquire);
    if s != UNKNOWN {
        return s;
    }
    let c = clock();
    let s = if reads_tsc(c) {
        SCALE.store(c.delta_as_nanos(0, 1 << SHIFT), Ordering::Relaxed);
        TSC
    } else {
        QUANTA
    };
    // Release: a thread that sees TSC sees the scale.
    SOURCE.store(s, Ordering::Release);
    s
}

/// Whether quanta's raw readings are the TSC itself (its counter source):
/// a reading between two `rdtsc`, three times over (a monotonic-clock
/// reading in nanoseconds landing in a window of a few dozen ticks each
/// time is out of the question).
#[cfg(target_arch = "x86_64")]
fn reads_tsc(c: &quanta::Clock) -> bool {
    (0..3).all(|_| {
        // SAFETY: `rdtsc` exists on every x86_64 CPU.
        let a = unsafe { std::arch::x86_64::_rdtsc() };
        let q = c.raw();
        // SAFETY: as above.
        let b = unsafe { std::arch::x86_64::_rdtsc() };
        a <= q && q <= b
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn reads_tsc(_: &quanta::Clock) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_and_their_nanoseconds_agree_with_quanta_and_the_os() {
        let t = std::time::Instant::now();
        let a = now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = now();
        let os = t.elapsed().as_nanos() as u64;
        let ns = nanos(a, b);
        assert!(
            ns >= 20_000_000 && ns <= os + 1_000_000,
            "{ns} ns against {os} ns"
        );
        let q = clock().delta_as_nanos(a, b);
        assert!(
            ns.abs_diff(q) <= q / 1_000_000 + 1,
            "{ns} ns against quanta's {q} ns"
        );
        assert_eq!(nanos(b, a), 0, "not later: zero");
    }
}
