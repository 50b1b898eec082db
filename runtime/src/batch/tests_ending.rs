//! A worker that ends anyway (here by the test-only hook, which panics
//! outside the per-batch guard as a bug in the worker loop would): its
//! queue fails fast, and the batcher says how many workers are left.

use tch::Tensor;

use super::tests_common::*;
use super::{BatchError, BatchOptions, Ticket};
use crate::Context;

fn answer(t: Ticket) -> Result<Vec<Tensor>, BatchError> {
    until("an answer", || t.is_ready());
    t.wait()
}

#[test]
fn the_last_worker_ending_answers_the_queue_and_every_later_request_closed() {
    let _no_grad = tch::no_grad_guard();
    let (batcher, open) = gated(BatchOptions::new().workers(1).end_worker_at_batch(1));
    assert_eq!(batcher.live_workers(), 1);
    let held = batcher.submit(vec![rows(2, -1.0)]);
    until("the worker holds the first batch", || batcher.queued() == 0);
    let queued: Vec<Ticket> = (0..3)
        .map(|i| batcher.submit(vec![rows(2, f64::from(i))]))
        .collect();
    open.send(()).unwrap();
    // The batch it handled is answered; then the worker ends.
    assert_eq!(answer(held).unwrap()[0].double_value(&[0, 0]), -2.0);
    for t in queued {
        assert_eq!(answer(t).unwrap_err(), BatchError::Closed);
    }
    assert_eq!(batcher.live_workers(), 0);
    // Answered before `submit` returns: nothing waits for a worker.
    let later = batcher.submit(vec![rows(2, 1.0)]);
    assert!(later.is_ready());
    assert_eq!(later.wait().unwrap_err(), BatchError::Closed);
    let later = batcher.submit_in(Context::capture(), vec![rows(2, 1.0)], None);
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
        answer(batcher.submit(vec![rows(2, 1.0)])).unwrap()[0].double_value(&[0, 0]),
        2.0
    );
    until("one worker ended", || batcher.live_workers() == 1);
    for i in 0..4 {
        let v = f64::from(i);
        let y = answer(batcher.submit(vec![rows(2, v)])).unwrap();
        assert_eq!(y[0].double_value(&[0, 0]), 2.0 * v);
    }
    assert_eq!(batcher.live_workers(), 1);
}
