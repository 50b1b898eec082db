//! `timed`: wall time of a scope, recorded per name (see [`crate::report`]).
//!
//! CUDA kernels run asynchronously: without a synchronisation a timer
//! measures kernel *launches*. With `sync`, and by default whenever the
//! thread's current device ([`crate::current_device`]) is a CUDA device, the
//! timer synchronises that device at entry (so earlier work is not billed
//! to the scope) and at exit (so the scope's own kernels are). We chose
//! `synchronize` over CUDA events: events would time only the stream they
//! were recorded on and need the CUDA runtime headers; a device-wide
//! synchronize is what `torch.cuda.synchronize()`-based Python timers do.
//! On the CPU the two calls are skipped.
//!
//! `timed(events)` ([`SyncMode::Events`]) times by a pair of CUDA events
//! on the current stream instead: nothing waits at entry or exit, and the
//! run is read (waiting for the second event only) when
//! [`report()`](crate::report()) is read, or earlier when a later
//! `timed(events)` run ends and finds it done. It measures the GPU work
//! queued on that stream between entry and exit (kernels queued on other
//! streams are not billed); on a CPU device it is a wall-clock timer.

use std::convert::Infallible;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tch::Device;

use crate::Scope;
use crate::cuda::{Event, Stream};
use crate::report::{self, Measurement, Outcome, Site};
use crate::trace::{self, Kind, SpanRecord};
use crate::{clock, cuda};

/// When a [`Timed`] scope synchronises the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// When the thread's current device is CUDA (the default).
    Auto,
    /// Always: the current device if CUDA, else the current CUDA device;
    /// nothing on a machine without CUDA.
    Always,
    /// Never: measures launches on CUDA.
    Never,
    /// A pair of CUDA events on the current stream when the current device
    /// is CUDA, read later without a device-wide synchronise; wall time on
    /// the CPU.
    Events,
}

/// The `timed` scope.
///
/// ```
/// use tch_scope::{Scope, Timed};
/// let guard = Timed::new("doc_timed").enter().unwrap();
/// std::thread::sleep(std::time::Duration::from_millis(2));
/// drop(guard);
/// let t = tch_scope::report().timing("doc_timed").cloned().unwrap();
/// assert_eq!(t.count, 1);
/// assert!(t.total >= std::time::Duration::from_millis(2));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Timed {
    site: &'static Site,
    sync: SyncMode,
}

impl Timed {
    /// Times under `name` (looked up at run time; the macros use a static
    /// [`Site`] per use instead).
    pub fn new(name: &'static str) -> Self {
        Self::at(Site::named(name))
    }

    /// Times under `site`.
    pub fn at(site: &'static Site) -> Self {
        Self {
            site,
            sync: SyncMode::Auto,
        }
    }

    /// Sets when to synchronise.
    pub fn sync(mut self, sync: SyncMode) -> Self {
        self.sync = sync;
        self
    }

    fn sync_device(&self) -> Option<usize> {
        match (self.sync, crate::current_device()) {
            (SyncMode::Never | SyncMode::Events, _) => None,
            (_, Device::Cuda(i)) => Some(i),
            (SyncMode::Auto, _) => None,
            (SyncMode::Always, _) => crate::current_cuda_device(),
        }
    }
}

/// Whether any thread's current device can be a CUDA one: never where the
/// shim was built without CUDA (entering `device(0)` fails there), so a
/// timer on such a build need not read the thread's device. Asked once.
#[inline]
fn cuda_possible() -> bool {
    static CUDA: AtomicU8 = AtomicU8::new(0);
    match CUDA.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            let built = cuda::built_with_cuda();
            CUDA.store(1 + u8::from(built), Ordering::Relaxed);
            built
        }
    }
}

/// Records the elapsed time when dropped.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct TimedGuard {
    /// `None` when measuring was off at entry: the guard does nothing (a
    /// null word, so a switched-off scope is one store and one test).
    /// Dropped only by `finish`, out of line, so that the guard's drop
    /// glue is one test and inlines.
    run: ManuallyDrop<Option<Run>>,
}

#[derive(Debug)]
struct Run {
    site: &'static Site,
    /// A raw clock reading (`crate::clock`).
    start: u64,
    sync: Option<i32>,
    /// `timed(events)` on CUDA: the stream the first event was recorded on
    /// (the end event goes on the same stream, whichever thread finishes
    /// the run) and that event (boxed: a small guard is cheaper to move on
    /// the common path).
    events: Option<Box<(Stream, Event)>>,
    failed: bool,
    /// Exited while a future holding the guard waits (`Scope::suspend`).
    span: crate::tracing_span::GuardSpan,
}

impl Scope for Timed {
    type Guard = TimedGuard;
    type Error = Infallible;

    /// A timer's exit never fails the work: a CUDA call that fails while
    /// leaving goes to the exit hook and the run is timed by the wall clock
    /// (so the success path need not look for exit errors).
    const EXIT_CAN_FAIL: bool = false;

    /// An `Err` the expansion saw is recorded as a failed run.
    #[inline(always)]
    fn exit(guard: &mut Self::Guard, outcome: Outcome) {
        if outcome == Outcome::Failed {
            guard.mark_failed();
        }
    }

    /// Steps out of its `tracing` span while the future waits.
    #[inline(always)]
    fn suspend(guard: &mut Self::Guard) {
        if let Some(r) = &mut *guard.run {
            r.span.suspend();
        }
    }

    /// Re-enters its `tracing` span on the polling thread.
    #[inline(always)]
    fn resume(guard: &mut Self::Guard) {
        if let Some(r) = &mut *guard.run {
            r.span.resume();
        }
    }

    /// Never fails: a timer does not stop the work it measures. A CUDA
    /// synchronisation that fails at entry goes to the exit hook and the
    /// run is timed without it.
    #[inline]
    fn enter(&mut self) -> Result<TimedGuard, Infallible> {
        Ok(TimedGuard {
            run: ManuallyDrop::new(report::is_enabled().then(|| self.start())),
        })
    }
}

impl Timed {
    /// The measuring entry. Inline for a timer that needs no device work
    /// (the common case: a CPU device, or `sync` off); the rest is cold.
    #[inline]
    fn start(&self) -> Run {
        let on_cuda = cuda_possible() && matches!(crate::current_device(), Device::Cuda(_));
        let (sync, events) = match self.sync {
            SyncMode::Never => (None, None),
            SyncMode::Auto | SyncMode::Events if !on_cuda => (None, None),
            _ => self.start_on_device(),
        };
        Run {
            site: self.site,
            span: crate::tracing_span::guard_span!(
                target: "tch_scope",
                "timed",
                name = self.site.name()
            ),
            start: clock::now(),
            sync,
            events,
            failed: false,
        }
    }

    /// The device work at entry: a synchronise, or the first event.
    #[cold]
    #[inline(never)]
    fn start_on_device(&self) -> (Option<i32>, Option<Box<(Stream, Event)>>) {
        let sync = self.sync_device().and_then(|i| {
            let synced = cuda::checked_index(i).and_then(|d| cuda::synchronize(d).map(|()| d));
            synced
                .map_err(|r| {
                    crate::exit::report(
                        format!("timed({:?})", self.site.name()),
                        format_args!("cannot synchronise cuda:{i}, timing without it: {r}"),
                    );
                })
                .ok()
        });
        let events = match (self.sync, crate::current_device()) {
            (SyncMode::Events, Device::Cuda(i)) => start_event(self.site, i),
            _ => None,
        };
        (sync, events)
    }
}

impl TimedGuard {
    /// Time since entry, so far (zero if measuring was off at entry).
    ///
    /// ```
    /// use tch_scope::{Scope, Timed};
    /// let g = Timed::new("doc_elapsed").enter().unwrap();
    /// assert!(g.elapsed() < std::time::Duration::from_secs(60));
    /// ```
    pub fn elapsed(&self) -> Duration {
        self.run.as_ref().map_or(Duration::ZERO, |r| {
            Duration::from_nanos(clock::nanos(r.start, clock::now()))
        })
    }

    /// Records this run as [`Outcome::Failed`] (the body returned an `Err`);
    /// attributes on functions returning `Result` call it for you.
    ///
    /// ```
    /// use tch_scope::{Scope, Timed};
    /// let mut g = Timed::new("doc_failed").enter().unwrap();
    /// g.mark_failed();
    /// drop(g);
    /// assert_eq!(tch_scope::report().timing("doc_failed").unwrap().failed, 1);
    /// ```
    pub fn mark_failed(&mut self) {
        if let Some(r) = &mut *self.run {
            r.failed = true;
        }
    }
}

/// An event recorded on `device`'s current stream; `None` (and a wall
/// clock) where CUDA refuses, said to the exit hook.
fn start_event(site: &Site, device: usize) -> Option<Box<(Stream, Event)>> {
    let record = || -> Result<(Stream, Event), crate::ScopeError> {
        let mut e = Event::new()?;
        let stream = Stream::current(device)?;
        e.record(&stream)?;
        Ok((stream, e))
    };
    record()
        .map_err(|e| {
            crate::exit::report(
                format!("timed({:?}, events)", site.name()),
                format_args!("timing by the wall clock instead: {e}"),
            );
        })
        .ok()
        .map(Box::new)
}

impl Drop for TimedGuard {
    #[inline]
    fn drop(&mut self) {
        if self.run.is_some() {
            // SAFETY: `run` is taken once, here, and never read again.
            let run = unsafe { ManuallyDrop::take(&mut self.run) };
            if let Some(Run {
                site,
                start,
                sync,
                events,
                failed,
                span,
            }) = run
            {
                // Field by field: in registers, where a copy of the run
                // through memory cost a span ≈ 1.5 ns.
                finish(site, start, sync, events, failed, span);
            }
        }
    }
}

impl Run {
    fn outcome(&self) -> Outcome {
        Outcome::at_exit_or(if self.failed {
            Outcome::Failed
        } else {
            Outcome::Completed
        })
    }

    /// Records the end event on the stream of the first, and queues the
    /// pair.
    fn finish_events(&self, stream: Stream, start: Event) -> Result<(), crate::ScopeError> {
        let mut end = Event::new()?;
        end.record(&stream)?;
        report::events::push(report::events::Pending {
            site: self.site,
            start,
            end,
            outcome: self.outcome(),
        });
        Ok(())
    }

    /// The device work at exit: the end event (`true`: the run is queued,
    /// nothing more to record now) or a synchronise.
    #[cold]
    #[inline(never)]
    fn end_on_device(&mut self) -> bool {
        if let Some(events) = self.events.take() {
            let (stream, start) = *events;
            match self.finish_events(stream, start) {
                Ok(()) => return true,
                Err(e) => crate::exit::report(
                    format!("timed({:?}, events)", self.site.name()),
                    format_args!("recording the wall time instead: {e}"),
                ),
            }
        }
        if let Some(d) = self.sync {
            // Never panic in Drop: a failed sync still records the time.
            let _ = cuda::synchronize(d);
        }
        false
    }
}

/// Records a run (its fields, see the guard's `drop`). Out of line: the
/// guard's drop is one test, a switched-off scope's whole exit.
#[inline(never)]
fn finish(
    site: &'static Site,
    start: u64,
    sync: Option<i32>,
    events: Option<Box<(Stream, Event)>>,
    failed: bool,
    span: crate::tracing_span::GuardSpan,
) {
    let mut r = Run {
        site,
        start,
        sync,
        events,
        failed,
        span,
    };
    r.finish();
}

impl Run {
    #[inline(always)]
    fn finish(&mut self) {
        if (self.events.is_some() || self.sync.is_some()) && self.end_on_device() {
            return;
        }
        let end = clock::now();
        let outcome = self.outcome();
        // Nothing here waits for `end` to come back (a `rdtsc` takes many
        // cycles): the totals take the raw ticks and convert them one run
        // later, the trace stores them.
        report::record_run(self.site, end.wrapping_sub(self.start), outcome);
        if trace::recording() {
            trace::push(&SpanRecord {
                kind: Kind::Timed,
                name: self.site.name_ref(),
                start: self.start,
                end,
                outcome,
                bytes: [0; 4],
            });
        }
        // Last: by now `end` has come back, and the recorder's atomics (which
        // wait for the value's store) do not wait for the clock.
        #[cfg(feature = "metrics")]
        report::record_time_metrics(self.site, clock::nanos(self.start, end), outcome);
        report::publish(|| Measurement::Time {
            name: self.site.name(),
            elapsed: Duration::from_nanos(clock::nanos(self.start, end)),
            synced: self.sync.is_some(),
            outcome,
        });
    }
}
