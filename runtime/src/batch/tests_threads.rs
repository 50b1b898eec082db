//! Each worker's intra-op thread count: set on the worker's own thread,
//! the process's value and other threads' counts left alone.

use std::sync::Arc;

use tch::{Device, Kind, Tensor};

use super::tests_common::*;
use super::{BatchOptions, Batcher};
use crate::{Inference, WithMode};

/// The intra-op thread count the forward saw on its worker, for a
/// batcher with `options`.
fn seen_by_the_worker(options: BatchOptions) -> i32 {
    let served = Arc::new(Inference::new(WithMode::new(Double)).unwrap());
    let batcher = Batcher::new(served, options, |m, xs| {
        let n = tch::get_num_threads();
        Ok(vec![m.forward(&xs[0]), Tensor::from(n).reshape([1])])
    })
    .unwrap();
    let x = Tensor::ones([1, 2], (Kind::Float, Device::Cpu));
    let out = batcher.submit(vec![x]).wait().unwrap();
    assert_eq!(out[0].double_value(&[0, 1]), 2.0);
    i32::try_from(out[1].int64_value(&[0])).unwrap()
}

/// A new thread's count: the process value, read at its first op.
fn a_new_threads_count() -> i32 {
    std::thread::spawn(tch::get_num_threads).join().unwrap()
}

#[test]
fn workers_run_their_forwards_on_their_own_intra_op_thread_count() {
    let here = tch::get_num_threads();
    let new = a_new_threads_count();
    // The default: one thread a worker.
    assert_eq!(seen_by_the_worker(BatchOptions::new()), 1);
    assert_eq!(
        seen_by_the_worker(BatchOptions::new().intra_op_threads(3)),
        3
    );
    let two_workers = BatchOptions::new().workers(2).intra_op_threads(2);
    assert_eq!(seen_by_the_worker(two_workers), 2);
    // 0: libtorch's count, as a new thread gets it.
    assert_eq!(
        seen_by_the_worker(BatchOptions::new().intra_op_threads(0)),
        new
    );
    // Neither this thread's count nor the process's value moved.
    assert_eq!(tch::get_num_threads(), here);
    assert_eq!(a_new_threads_count(), new);
}
