//! A worker that ends anyway (here by the test-only hook, which panics
//! outside the per-batch guard as a bug in the worker loop would): its
//! queue fails fast, and the batcher says how many workers are left.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tch::{Device, Kind, Tensor};

use super::{BatchError, BatchOptions, Batcher, Ticket};
use crate::{Context, Inference, WithMode};

#[derive(Debug)]
struct Double;

impl tch::nn::Module for Double {
    fn forward(&self, x: &Tensor) -> Tensor {
        x * 2
    }
}

type Gate = Arc<std::sync::Mutex<mpsc::Receiver<()>>>;

/// A batcher over `Double` whose forward of a batch starting with `-1`
/// waits for a message on the gate; and the gate's sender.
fn gated(options: BatchOptions) -> (Batcher<WithMode<Double>>, mpsc::Sender<()>) {
    let (open, gate) = mpsc::channel();
    let gate: Gate = Arc::new(std::sync::Mutex::new(gate));
    let served = Arc::new(Inference::new(WithMode::new(Double)).unwrap());
    let batcher = Batcher::new(served, options, move |m, xs| {
        if xs[0].double_value(&[0, 0]) == -1.0 {
            gate.lock().unwrap().recv().unwrap();
        }
        Ok(vec![m.forward(&xs[0])])
    })
    .unwrap();
    (batcher, open)
}

fn row(v: f64) -> Tensor {
    Tensor::full([1, 2], v, (Kind::Float, Device::Cpu))
}

/// Waits (bounded: a failure, not a hang) until `what` holds.
fn until(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn answer(t: Ticket) -> Result<Vec<Tensor>, BatchError> {
    until("an answer", || t.is_ready());
    t.wait()
}

#[test]
fn the_last_worker_ending_answers_the_queue_and_every_later_request_closed() {
    let _no_grad = tch::no_grad_guard();
    let (batcher, open) = gated(BatchOptions::new().workers(1).end_worker_at_batch(1));
    assert_eq!(batcher.live_workers(), 1);
    let held = batcher.submit(vec![row(-1.0)]);
    until("the worker holds the first batch", || batcher.queued() == 0);
    let queued: Vec<Ticket> = (0..3)
        .map(|i| batcher.submit(vec![row(f64::from(i))]))
        .collect();
    open.send(()).unwrap();
    // The batch it handled is answered; then the worker ends.
    assert_eq!(answer(held).unwrap()[0].double_value(&[0, 0]), -2.0);
    for t in queued {
        assert_eq!(answer(t).unwrap_err(), BatchError::Closed);
    }
    assert_eq!(batcher.live_workers(), 0);
    // Answered before `submit` returns: nothing waits for a worker.
    let later = batcher.submit(vec![row(1.0)]);
    assert!(later.is_ready());
    assert_eq!(later.wait().unwrap_err(), BatchError::Closed);
    let later = batcher.submit_in(Context::capture(), vec![row(1.0)], None);
    assert_eq!(later.wait().unwrap_err(), BatchError::Closed);
    let s = batcher.stats();
    assert_eq!((s.submitted, s.inferences, s.refused), (4, 1, 2), "{s:?}");
}

#[test]
fn one_worker_ending_leaves_the_others_serving() {
    let _no_grad = tch::no_grad_guard();
    let options = BatchOptions::new().workers(2).end_worker_at_batch(1);
    let (batcher, _open) = gated(options);
    assert_eq!(batcher.live_workers(), 2);
    assert_eq!(
        answer(batcher.submit(vec![row(1.0)])).unwrap()[0].double_value(&[0, 0]),
        2.0
    );
    until("one worker ended", || batcher.live_workers() == 1);
    for i in 0..4 {
        let v = f64::from(i);
        let y = answer(batcher.submit(vec![row(v)])).unwrap();
        assert_eq!(y[0].double_value(&[0, 0]), 2.0 * v);
    }
    assert_eq!(batcher.live_workers(), 1);
}
