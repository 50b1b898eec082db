//! `timed(events)`: runs timed by a pair of CUDA events, waiting here until
//! the GPU has passed the second one. A pair is read without blocking when
//! a later `timed(events)` scope ends and finds it done, and by
//! [`report()`](super::report()), which waits for each (for the event
//! only: other streams and devices go on).

use std::sync::Mutex;

use super::{Measurement, Outcome, Site, publish, record_time};
use crate::cuda::Event;

/// One run whose events are recorded but not yet read.
pub(crate) struct Pending {
    pub(crate) site: &'static Site,
    pub(crate) start: Event,
    pub(crate) end: Event,
    pub(crate) outcome: Outcome,
}

static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());

fn pending() -> std::sync::MutexGuard<'static, Vec<Pending>> {
    crate::sync::lock(&PENDING)
}

/// Queues a run, then records the runs already done (without waiting).
pub(crate) fn push(run: Pending) {
    let done: Vec<Pending> = {
        let mut list = pending();
        list.push(run);
        let (done, wait): (Vec<_>, Vec<_>) =
            list.drain(..).partition(|p| p.end.query().unwrap_or(true));
        *list = wait;
        done
    };
    done.into_iter().for_each(finish);
}

/// Records every queued run, waiting for each one's end event.
pub(crate) fn resolve_all() {
    let all = std::mem::take(&mut *pending());
    all.into_iter().for_each(finish);
}

fn finish(run: Pending) {
    let elapsed = match run.start.elapsed(&run.end) {
        Ok(d) => d,
        Err(e) => {
            crate::exit::report(
                format!("timed({:?}, events)", run.site.name()),
                format_args!("cannot read the CUDA events; run not recorded: {e}"),
            );
            return;
        }
    };
    let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
    record_time(run.site, ns, run.outcome);
    super::record_time_metrics(run.site, ns, run.outcome);
    publish(|| Measurement::Time {
        name: run.site.name(),
        elapsed,
        synced: true,
        outcome: run.outcome,
    });
}
