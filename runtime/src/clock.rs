//! The clock of `timed`, the memory scopes and the trace: the CPU's
//! time-stamp counter through `quanta`, calibrated once against the OS's
//! monotonic clock (quanta falls back to that clock where the TSC is not
//! invariant). One read is a `rdtsc`, a fraction of `Instant::now()`.

use std::sync::OnceLock;

fn clock() -> &'static quanta::Clock {
    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    // Calibration runs here, before the first reading is taken, so it is
    // never billed to a scope.
    CLOCK.get_or_init(quanta::Clock::new)
}

/// A raw reading; only differences of two, through [`nanos`], mean time.
#[inline]
pub(crate) fn now() -> u64 {
    clock().raw()
}

/// Nanoseconds from `start` to `end` (0 if `end` is not later).
#[inline]
pub(crate) fn nanos(start: u64, end: u64) -> u64 {
    clock().delta_as_nanos(start, end)
}
