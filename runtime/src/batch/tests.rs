//! The batcher's metrics, seen by a global recorder (the workers record
//! on their own threads, so a thread-local recorder would see nothing).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use ::metrics::{
    Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use tch::{Device, Kind, Tensor};

use super::{BatchError, BatchOptions, Batcher, metrics as m};
use crate::{Inference, WithMode};

/// (metric, `name` label, value) of every counter increment and
/// histogram value recorded in this process.
static SEEN: Mutex<Vec<(String, String, f64)>> = Mutex::new(Vec::new());

/// The batcher name whose first batch-size value makes the recorder panic
/// (a recorder's bug, met on a worker thread).
const PANICS: &str = "metrics-panics";
static PANICKED: AtomicBool = AtomicBool::new(false);

struct Keep;
struct One(Key);

impl One {
    fn push(&self, v: f64) {
        let name = self
            .0
            .labels()
            .find(|l| l.key() == "name")
            .map_or(String::new(), |l| l.value().to_owned());
        if name == PANICS && self.0.name() == m::SIZE && !PANICKED.swap(true, Ordering::SeqCst) {
            panic!("the recorder panics");
        }
        SEEN.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((self.0.name().to_owned(), name, v));
    }
}

/// Installs `Keep` as the global recorder, once for the lib's tests.
fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        ::metrics::set_global_recorder(Keep).expect("the only global recorder of the lib tests");
    });
}

impl CounterFn for One {
    fn increment(&self, v: u64) {
        self.push(v as f64);
    }
    fn absolute(&self, _: u64) {}
}

impl HistogramFn for One {
    fn record(&self, v: f64) {
        self.push(v);
    }
}

impl Recorder for Keep {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(One(key.clone())))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(Arc::new(One(key.clone())))
    }
}

#[derive(Debug)]
struct Double;

impl tch::nn::Module for Double {
    fn forward(&self, x: &Tensor) -> Tensor {
        x * 2
    }
}

#[test]
fn batches_drops_and_counts_reach_the_recorder() {
    install();
    // Grad mode off (requests with it on always run alone).
    let _no_grad = tch::no_grad_guard();
    let served = Arc::new(Inference::new(WithMode::new(Double)).unwrap());
    // The first forward waits until `open`: the others queue meanwhile.
    let open = Arc::new(AtomicBool::new(false));
    let o = Arc::clone(&open);
    let options = BatchOptions::new().name("metrics-unit");
    let batcher = Batcher::new(served, options, move |model, xs| {
        while !o.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(vec![model.forward(&xs[0])])
    })
    .unwrap();
    let x = || Tensor::ones([1, 2], (Kind::Float, Device::Cpu));
    let first = batcher.submit(vec![x()]);
    while batcher.queued() > 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let a = batcher.submit(vec![x()]);
    let b = batcher.submit(vec![x()]);
    let late = batcher.submit_in(crate::Context::capture(), vec![x()], Some(Instant::now()));
    drop(batcher.submit(vec![x()]));
    open.store(true, Ordering::SeqCst);
    for t in [first, a, b] {
        t.wait().unwrap();
    }
    assert!(late.wait().is_err());
    drop(batcher); // joins the workers: every value is in

    let seen = SEEN.lock().unwrap();
    let values = |metric: &str| -> Vec<f64> {
        seen.iter()
            .filter(|(k, n, _)| k == metric && n == "metrics-unit")
            .map(|&(_, _, v)| v)
            .collect()
    };
    assert_eq!(values(m::SIZE), [1.0, 2.0]);
    assert_eq!(values(m::QUEUE_SECONDS).len(), 3);
    assert!(
        values(m::QUEUE_SECONDS)
            .iter()
            .all(|&s| (0.0..60.0).contains(&s))
    );
    assert_eq!(values(m::EXPIRED), [1.0]);
    assert_eq!(values(m::CANCELLED), [1.0]);
    assert_eq!(values(m::EXECUTIONS), [1.0, 1.0]);
    assert_eq!(values(m::INFERENCES), [1.0, 2.0]);
}

#[test]
fn a_recorder_that_panics_fails_its_batch_and_the_worker_lives_on() {
    install();
    let _no_grad = tch::no_grad_guard();
    let served = Arc::new(Inference::new(WithMode::new(Double)).unwrap());
    let options = BatchOptions::new().name(PANICS);
    let batcher =
        Batcher::new(served, options, |model, xs| Ok(vec![model.forward(&xs[0])])).unwrap();
    let x = Tensor::ones([1, 2], (Kind::Float, Device::Cpu));
    match answer(batcher.submit(vec![x.shallow_clone()])) {
        Err(BatchError::Panicked(msg)) => assert_eq!(msg, "the recorder panics"),
        other => panic!("expected the recorder's panic, got {other:?}"),
    }
    let y = answer(batcher.submit(vec![x])).unwrap();
    assert_eq!(y[0].double_value(&[0, 1]), 2.0);
}

/// The ticket's answer, or a failure if none comes within a minute.
fn answer(t: super::Ticket) -> Result<Vec<Tensor>, BatchError> {
    let start = Instant::now();
    while !t.is_ready() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no answer within a minute: no worker is computing"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    t.wait()
}
