//! `timed`: what it records, where it goes, and that panics are counted.

use std::time::Duration;

use tch_scope::report::{self, Measurement, Outcome};
use tch_scope::{scoped, timed};

#[timed]
fn step(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

#[test]
fn attribute_records_under_the_function_path() {
    for _ in 0..5 {
        step(2);
    }
    let r = report::report();
    let t = r
        .timing("integration::timing::step")
        .expect("recorded under module::fn");
    assert_eq!(t.count, 5);
    assert_eq!(t.panicked, 0);
    assert!(t.min >= Duration::from_millis(2), "{t:?}");
    assert!(t.min <= t.p50 && t.p50 <= t.p95 && t.p95 <= t.max, "{t:?}");
    assert_eq!(t.mean, t.total / 5);
}

#[test]
fn percentiles_follow_the_distribution() {
    // 39 short runs and one long one: p50 short, p95 short, max long. The
    // gap (1 ms vs 300 ms, threshold 150 ms) leaves room for a loaded CI
    // machine that oversleeps a few short runs.
    for i in 0..40 {
        let ms = if i == 7 { 300 } else { 1 };
        scoped!(timed("timing::mixed") => std::thread::sleep(Duration::from_millis(ms)));
    }
    let t = report::report().timing("timing::mixed").cloned().unwrap();
    assert_eq!(t.count, 40);
    assert!(t.p50 < Duration::from_millis(150), "{t:?}");
    assert!(t.p95 < Duration::from_millis(150), "{t:?}");
    assert!(t.max >= Duration::from_millis(300), "{t:?}");
}

#[test]
fn panics_are_recorded_and_marked() {
    let r = std::panic::catch_unwind(|| scoped!(timed("timing::panics") => panic!("inside")));
    assert!(r.is_err());
    scoped!(timed("timing::panics") => ());
    let t = report::report().timing("timing::panics").cloned().unwrap();
    assert_eq!((t.count, t.panicked), (2, 1));
}

#[test]
fn threads_are_merged_including_finished_ones() {
    let handles: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                for _ in 0..25 {
                    scoped!(timed("timing::threads") => ());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(
        report::report().timing("timing::threads").unwrap().count,
        100
    );
}

#[test]
fn sync_without_cuda_is_a_plain_timer() {
    // On a machine without CUDA there is nothing to synchronise; with
    // CUDA, `sync` synchronises the current CUDA device.
    let v = scoped!(timed("timing::sync", sync) => 42);
    assert_eq!(v, 42);
    let v = scoped!(timed(name = "timing::nosync", sync = false) => 43);
    assert_eq!(v, 43);
    let r = report::report();
    assert_eq!(r.timing("timing::sync").unwrap().count, 1);
    assert_eq!(r.timing("timing::nosync").unwrap().count, 1);
}

/// `timed(events)` on the CPU: a wall-clock timer, recorded at once.
#[test]
fn events_on_the_cpu_time_by_the_wall_clock() {
    // Not `step`: its count belongs to `attribute_records_under_the_function_path`,
    // which runs beside this test.
    let v = scoped!(timed("timing::events", events) => {
        std::thread::sleep(Duration::from_millis(2));
        44
    });
    assert_eq!(v, 44);
    let t = report::report().timing("timing::events").cloned().unwrap();
    assert_eq!(t.count, 1);
    assert!(t.total >= Duration::from_millis(2), "{t:?}");
}

/// Without CUDA, streams and events cannot be made: a ScopeError that says
/// why, naming the device.
#[test]
fn streams_and_events_without_cuda_are_scope_errors() {
    use tch_scope::cuda::{Event, Stream};
    if tch_scope::cuda_device_count() > 0 {
        return; // tests/gpu.rs covers them
    }
    for e in [
        Stream::from_pool(0, false).unwrap_err(),
        Stream::current(0).unwrap_err(),
        Stream::default_stream(1).unwrap_err(),
    ] {
        assert!(e.device().is_some(), "{e}");
        assert!(e.reason().contains("CUDA is not available"), "{e}");
        assert!(
            e.to_string().starts_with("cannot enter `cuda::Stream::"),
            "{e}"
        );
    }
    let e = Event::new().unwrap_err();
    assert!(e.reason().contains("CUDA is not available"), "{e}");
}

#[test]
fn callback_and_serde_and_table() {
    use std::sync::{Arc, Mutex};
    let seen: Arc<Mutex<Vec<(String, Outcome)>>> = Arc::default();
    let s = seen.clone();
    report::set_callback(move |m| {
        if let Measurement::Time { name, outcome, .. } = m
            && name.starts_with("timing::cb")
        {
            s.lock().unwrap().push((name.to_string(), *outcome));
        }
    });
    scoped!(timed("timing::cb") => ());
    let _ = std::panic::catch_unwind(|| scoped!(timed("timing::cb") => panic!("x")));
    report::clear_callback();
    scoped!(timed("timing::cb") => ()); // after clearing: not seen
    assert_eq!(
        *seen.lock().unwrap(),
        [
            ("timing::cb".to_string(), Outcome::Completed),
            ("timing::cb".to_string(), Outcome::Panicked)
        ]
    );

    let r = report::report();
    let json = serde_json::to_value(&r).unwrap();
    let row = json["timings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "timing::cb")
        .unwrap();
    assert_eq!(row["count"], 3);
    assert_eq!(row["panicked"], 1);
    let table = r.to_string();
    let line = table
        .lines()
        .find(|l| l.starts_with("timing::cb "))
        .unwrap();
    assert!(line.split_whitespace().nth(1) == Some("3"), "{line}");
}

// ---- a function's `Err` is a failed run ---------------------------------------

/// Any error type the function uses must take a `ScopeError` (a scope
/// that can't be entered returns it); boxed errors do.
type Error = Box<dyn std::error::Error>;

#[timed("timing::parse")]
fn parse(s: &str) -> Result<i32, Error> {
    if s.is_empty() {
        return Ok(0); // an early `return` still goes through the record
    }
    let n: i32 = s.trim().parse()?; // `?` returns from the function, as written
    Ok(n * 2)
}

struct Buffer(Vec<i32>);

impl Buffer {
    /// A `&mut self` method handing out a borrow of `self`, generic, with
    /// an inner attribute: the closure must keep all of that legal.
    #[tch_scope::scope(timed("timing::slot"), no_grad)]
    fn slot<I: TryInto<usize>>(&mut self, i: I) -> Result<&mut i32, Error> {
        #![allow(clippy::needless_question_mark)]
        let i = i.try_into().map_err(|_| "bad index")?;
        Ok(self.0.get_mut(i).ok_or_else(|| format!("no slot {i}"))?)
    }
}

#[test]
fn errors_are_recorded_and_marked_failed() {
    assert_eq!(parse("21").unwrap(), 42);
    assert_eq!(parse("").unwrap(), 0);
    assert!(parse("x").is_err());
    let t = report::report().timing("timing::parse").cloned().unwrap();
    assert_eq!((t.count, t.failed, t.panicked), (3, 1, 0), "{t:?}");

    let mut b = Buffer(vec![1, 2]);
    *b.slot(1u8).unwrap() += 10;
    assert_eq!(b.0, [1, 12]);
    assert_eq!(b.slot(5usize).unwrap_err().to_string(), "no slot 5");
    assert_eq!(b.slot(-1i64).unwrap_err().to_string(), "bad index");
    let t = report::report().timing("timing::slot").cloned().unwrap();
    assert_eq!((t.count, t.failed), (3, 2), "{t:?}");
    assert!(tch_scope::is_grad_enabled());
}

#[test]
fn a_failed_memory_scope_reports_failed() {
    #[tch_scope::memory_scope("timing::failed_memory")]
    fn fails() -> Result<(), Error> {
        Err("no".into())
    }
    assert!(fails().is_err());
    let r = tch_scope::last_memory_report().unwrap();
    assert_eq!(
        (r.name, r.outcome),
        ("timing::failed_memory", Outcome::Failed)
    );
}
