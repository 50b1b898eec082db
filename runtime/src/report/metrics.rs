//! The `metrics` feature: each measurement into the `metrics` facade,
//! for whichever recorder (exporter) the application installed.

use std::cell::RefCell;

use super::{Outcome, Site};

/// The histogram of `timed` runs, in seconds.
pub(crate) const TIMED_SECONDS: &str = "tch_scope_timed_seconds";
/// The histogram of memory scopes' peak growth, in bytes.
pub(crate) const MEMORY_BYTES: &str = "tch_scope_memory_bytes";

/// Gives the installed recorder the unit and help text of tch-scope's two
/// histograms (`tch_scope_timed_seconds`, `tch_scope_memory_bytes`).
///
/// Call it once after installing the recorder, as with any library's
/// metrics: exposition formats want a description (Prometheus's `# HELP`
/// line; `promtool check metrics` flags a metric without one), and a
/// recorder keeps only the descriptions it was given.
pub fn describe_metrics() {
    ::metrics::describe_histogram!(
        TIMED_SECONDS,
        ::metrics::Unit::Seconds,
        "Wall time of tch-scope `timed` runs, by row name and outcome."
    );
    ::metrics::describe_histogram!(
        MEMORY_BYTES,
        ::metrics::Unit::Bytes,
        "Peak memory growth of tch-scope memory scopes, by row name, device and outcome."
    );
}

/// What `histogram!` would register under, for the cached handles.
static METADATA: ::metrics::Metadata<'static> =
    ::metrics::Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));

/// This thread's histogram handles, by row id and outcome, each with the
/// recorder it was registered with: built once per row and recorder, not
/// per run (the `histogram!` macro builds its labels and asks the recorder
/// on every call).
type Handles = RefCell<Vec<Option<(usize, ::metrics::Histogram)>>>;

thread_local! {
    static TIMED: Handles = const { RefCell::new(Vec::new()) };
}

/// The recorder in force on this thread (a local one, the global one, or
/// the no-op one), as an address: a handle is valid only for it.
#[inline]
fn recorder() -> usize {
    ::metrics::with_recorder(|r| std::ptr::from_ref(r).cast::<()>() as usize)
}

/// One `timed` run of `ns` nanoseconds at `site`: into this thread's cached
/// handle for the site's row and the outcome. What it costs beside the
/// recorder's own work is a thread-local lookup and a compare; a handle
/// is registered (labels built, the recorder asked) once per row, outcome
/// and recorder.
#[inline]
pub(crate) fn time(site: &Site, ns: u64, outcome: Outcome) {
    let id = site.id();
    let slot = id * 3
        + match outcome {
            Outcome::Completed => 0,
            Outcome::Panicked => 1,
            Outcome::Failed => 2,
        };
    let now = recorder();
    let seconds = ns as f64 * 1e-9;
    let cached = TIMED.try_with(|t| {
        // Not borrowed only if a recorder's own `record` ran a `timed`
        // scope: that one goes uncached.
        let Ok(t) = t.try_borrow() else {
            return false;
        };
        match t.get(slot) {
            Some(Some((r, h))) if *r == now => {
                h.record(seconds);
                true
            }
            _ => false,
        }
    });
    if cached != Ok(true) {
        time_uncached(site, slot, now, seconds, outcome);
    }
}

/// The first run of a row and outcome on this thread (or under another
/// recorder): registers the handle, and keeps it unless the thread is
/// ending.
#[cold]
#[inline(never)]
fn time_uncached(site: &Site, slot: usize, now: usize, seconds: f64, outcome: Outcome) {
    let h = register(site.row_name(), outcome);
    h.record(seconds);
    let _ = TIMED.try_with(|t| {
        if let Ok(mut t) = t.try_borrow_mut() {
            if t.len() <= slot {
                t.resize_with(slot + 1, || None);
            }
            t[slot] = Some((now, h));
        }
    });
}

fn register(name: &'static str, outcome: Outcome) -> ::metrics::Histogram {
    let labels = vec![
        ::metrics::Label::from_static_parts("name", name),
        ::metrics::Label::from_static_parts("outcome", outcome.as_str()),
    ];
    let key = ::metrics::Key::from_parts(TIMED_SECONDS, labels);
    ::metrics::with_recorder(|r| r.register_histogram(&key, &METADATA))
}

/// One memory scope that grew by `bytes` at its peak, under the row `name`.
pub(crate) fn memory(name: &'static str, device: &str, bytes: u64, outcome: Outcome) {
    ::metrics::histogram!(
        MEMORY_BYTES,
        "name" => name,
        "device" => device.to_owned(),
        "outcome" => outcome.as_str()
    )
    .record(bytes as f64);
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use ::metrics::{
        Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString,
        Unit,
    };

    use super::{MEMORY_BYTES, TIMED_SECONDS};
    use crate::{HostMemory, Scope, Timed};

    /// (metric, labels, value) of every histogram value recorded.
    type Values = Arc<Mutex<Vec<(String, Vec<(String, String)>, f64)>>>;

    /// (metric, unit) of every histogram described.
    type Described = Arc<Mutex<Vec<(String, Option<Unit>)>>>;

    /// A recorder that keeps every histogram value and description.
    #[derive(Default)]
    struct Keep(Values, Described);

    struct One(Key, Values);

    impl HistogramFn for One {
        fn record(&self, v: f64) {
            let labels = self
                .0
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            self.1
                .lock()
                .unwrap()
                .push((self.0.name().to_owned(), labels, v));
        }
    }

    impl Recorder for Keep {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, name: KeyName, unit: Option<Unit>, _: SharedString) {
            self.1
                .lock()
                .unwrap()
                .push((name.as_str().to_owned(), unit));
        }
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(Arc::new(One(key.clone(), self.0.clone())))
        }
    }

    #[test]
    fn describe_metrics_names_both_histograms_with_their_units() {
        let keep = Keep::default();
        ::metrics::with_local_recorder(&keep, super::describe_metrics);
        assert_eq!(
            *keep.1.lock().unwrap(),
            vec![
                (TIMED_SECONDS.to_owned(), Some(Unit::Seconds)),
                (MEMORY_BYTES.to_owned(), Some(Unit::Bytes)),
            ]
        );
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn timed_runs_and_memory_scopes_reach_the_installed_recorder() {
        let keep = Keep::default();
        ::metrics::with_local_recorder(&keep, || {
            let g = Timed::new("metrics_unit_ok").enter().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(2));
            drop(g);
            let mut g = Timed::new("metrics_unit_err").enter().unwrap();
            g.mark_failed();
            drop(g);
            let panicked = std::panic::catch_unwind(|| {
                let _g = Timed::new("metrics_unit_panic").enter().unwrap();
                panic!("on purpose");
            });
            assert!(panicked.is_err());
            drop(HostMemory::new("metrics_unit_mem").enter().unwrap());
        });
        let seen = keep.0.lock().unwrap().clone();
        let find = |name: &str| {
            seen.iter()
                .find(|(_, l, _)| l.iter().any(|(k, v)| k == "name" && v == name))
                .unwrap_or_else(|| panic!("no value for {name} in {seen:?}"))
        };
        let (metric, l, secs) = find("metrics_unit_ok");
        assert_eq!(metric, TIMED_SECONDS);
        assert_eq!(
            *l,
            labels(&[("name", "metrics_unit_ok"), ("outcome", "completed")])
        );
        assert!(
            (0.002..60.0).contains(secs),
            "seconds, as f64: {secs} for a 2 ms sleep"
        );
        assert_eq!(
            find("metrics_unit_err").1[1],
            labels(&[("outcome", "failed")])[0]
        );
        assert_eq!(
            find("metrics_unit_panic").1[1],
            labels(&[("outcome", "panicked")])[0]
        );
        let (metric, l, bytes) = find("metrics_unit_mem");
        assert_eq!(metric, MEMORY_BYTES);
        assert_eq!(
            *l,
            labels(&[
                ("name", "metrics_unit_mem"),
                ("device", "cpu"),
                ("outcome", "completed")
            ])
        );
        assert!(
            *bytes >= 0.0 && bytes.fract() == 0.0,
            "whole bytes: {bytes}"
        );
        assert_eq!(seen.len(), 4, "one value per run: {seen:?}");
    }
}
