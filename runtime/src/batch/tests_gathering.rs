//! Workers holding batches for more requests: never all of them while no
//! forward runs (the cores would sit idle, each waiting for requests the
//! other may take).

use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use tch::{Device, Kind, Tensor};

use super::{BatchOptions, Batcher, Ticket};
use crate::{Inference, WithMode};

#[derive(Debug)]
struct Double;

impl tch::nn::Module for Double {
    fn forward(&self, x: &Tensor) -> Tensor {
        x * 2
    }
}

fn rows(n: i64, v: f64) -> Tensor {
    Tensor::full([1, n], v, (Kind::Float, Device::Cpu))
}

/// Waits (bounded: a failure, not a hang) until `what` holds.
fn until(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn doubled(t: Ticket, v: f64) {
    until("an answer", || t.is_ready());
    let out = t.wait().unwrap();
    assert_eq!(out[0].double_value(&[0, 0]), 2.0 * v);
}

#[test]
fn two_workers_holding_batches_while_no_forward_runs_both_compute() {
    // No delay limit: a held batch waits until it is full, another worker
    // is idle, or (the rule tested) no forward runs while another worker
    // holds a batch too.
    let options = BatchOptions::new()
        .workers(2)
        .max_batch(16)
        .max_delay(Duration::MAX);
    let (open, gate) = mpsc::channel::<()>();
    let gate = Arc::new(Mutex::new(gate));
    let served = Arc::new(Inference::new(WithMode::new(Double)).unwrap());
    let batcher = Batcher::new(served, options, move |m, xs| {
        if xs[0].double_value(&[0, 0]) == -1.0 {
            gate.lock().unwrap().recv().unwrap();
        }
        Ok(vec![m.forward(&xs[0])])
    })
    .unwrap();
    // One worker computes a forward held at the gate.
    let held = batcher.submit(vec![rows(2, -1.0)]);
    until("the held forward taken", || batcher.queued() == 0);
    // The other holds these two for more (a forward runs).
    let x = [1.0, 2.0].map(|v| batcher.submit(vec![rows(2, v)]));
    // Rows of another width, which its batch cannot take: left queued.
    let y = [3.0, 4.0].map(|v| batcher.submit(vec![rows(3, v)]));
    until("the other batch held, the wider rows queued", || {
        batcher.queued() == 2
    });
    // The held forward ends; its worker takes the wider rows and would
    // hold them for more too: two batches held, no forward running.
    open.send(()).unwrap();
    doubled(held, -1.0);
    for (t, v) in x.into_iter().zip([1.0, 2.0]) {
        doubled(t, v);
    }
    for (t, v) in y.into_iter().zip([3.0, 4.0]) {
        doubled(t, v);
    }
}
