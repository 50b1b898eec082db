//! Workers holding batches for more requests: never all of them while no
//! forward runs (the cores would sit idle, each waiting for requests the
//! other may take).

use std::time::Duration;

use super::tests_common::*;
use super::{BatchOptions, Ticket};

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
    let (batcher, open) = gated(options);
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
