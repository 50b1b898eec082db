//! What the batcher's tests share: a model that doubles its input, a
//! batcher over it whose forward can be held at a gate, rows, and a
//! bounded wait.

use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use tch::{Device, Kind, Tensor};

use super::{BatchOptions, Batcher};
use crate::{Inference, WithMode};

/// Doubles its input.
#[derive(Debug)]
pub(super) struct Double;

impl tch::nn::Module for Double {
    fn forward(&self, x: &Tensor) -> Tensor {
        x * 2
    }
}

/// A batcher over `Double` whose forward of a batch starting with `-1`
/// waits for a message on the gate; and the gate's sender.
pub(super) fn gated(options: BatchOptions) -> (Batcher<WithMode<Double>>, mpsc::Sender<()>) {
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
    (batcher, open)
}

/// One request's input: a row of `n` values `v`.
pub(super) fn rows(n: i64, v: f64) -> Tensor {
    Tensor::full([1, n], v, (Kind::Float, Device::Cpu))
}

/// Waits (bounded: a failure, not a hang) until `what` holds.
pub(super) fn until(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}
