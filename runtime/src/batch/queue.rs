//! The queue of waiting requests, and which of them may share a batch.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use tch::{Device, Kind, Tensor};

use super::ticket::Slot;
use crate::Context;

/// One submitted request, until it is answered.
pub(crate) struct Request {
    pub inputs: Vec<Tensor>,
    /// The scopes it was submitted in; entered around its forward.
    pub ctx: Context,
    /// Whether it asked for an autograd graph (grad mode on and an input
    /// requiring grad): computed alone, with grad mode. Else its forward
    /// runs in inference mode too.
    pub grad: bool,
    /// The earlier of the deadline given and the context's own.
    pub deadline: Option<Instant>,
    pub arrived: Instant,
    /// How its inputs may be concatenated with others' (`None`: they
    /// can't, it runs alone).
    pub shape: Option<Shape>,
    pub slot: Arc<Slot>,
    /// Where the trace's flow to its batch starts, if it recorded.
    pub flow: Option<crate::trace::FlowStart>,
}

impl Drop for Request {
    /// A request dropped unanswered (its worker panicked, or the batcher
    /// went away) is answered [`Closed`](super::BatchError::Closed); an
    /// answered one is left as it is.
    fn drop(&mut self) {
        self.slot.answer(Err(super::BatchError::Closed));
    }
}

/// Rows along dim 0 and, per input, what must agree for two requests'
/// inputs to be concatenated along dim 0: dtype, device and the other dims.
#[derive(Debug, PartialEq)]
pub(crate) struct Shape {
    pub rows: i64,
    pub inputs: Vec<(Kind, Device, Vec<i64>)>,
}

impl Shape {
    /// `None` when the inputs can't be batched: none at all, one without
    /// a dim 0, or inputs disagreeing on their row count (or having none).
    pub(crate) fn of(inputs: &[Tensor]) -> Option<Shape> {
        let mut rows = None;
        let mut sig = Vec::with_capacity(inputs.len());
        for x in inputs {
            let dims = x.size();
            let (&n, rest) = dims.split_first()?;
            if n < 1 || *rows.get_or_insert(n) != n {
                return None;
            }
            sig.push((x.f_kind().ok()?, x.device(), rest.to_vec()));
        }
        Some(Shape {
            rows: rows?,
            inputs: sig,
        })
    }
}

impl Request {
    /// Whether `self` may share a batch with `other`: both batchable, the
    /// same input dtypes, devices and dims past dim 0, and the same
    /// captured scope state ([`Context::same_state`]).
    pub(crate) fn fits(&self, other: &Request) -> bool {
        match (&self.shape, &other.shape) {
            (Some(a), Some(b)) => a.inputs == b.inputs && self.ctx.same_state(&other.ctx),
            _ => false,
        }
    }

    /// Its rows along dim 0 (0 when it can't be batched).
    pub(crate) fn rows(&self) -> i64 {
        self.shape.as_ref().map_or(0, |s| s.rows)
    }

    /// Whether its deadline has passed at `now`.
    pub(crate) fn expired(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| d <= now)
    }
}

/// What the workers share under one lock.
#[derive(Default)]
pub(crate) struct Queue {
    pub requests: VecDeque<Request>,
    /// Workers waiting for a request.
    pub idle: usize,
    /// Workers holding a batch and waiting (up to `max_delay`) for more.
    pub gathering: usize,
    pub closed: bool,
}

impl Queue {
    /// Moves into `batch` the queued requests that fit its first one, in
    /// arrival order, until it holds `max` of them. A request whose rows
    /// would take the batch's past `i64::MAX` (zero-element inputs can
    /// claim any number of rows) is left for another batch.
    pub(crate) fn take_fitting(&mut self, batch: &mut Vec<Request>, max: usize) {
        if batch.len() >= max || batch[0].shape.is_none() {
            return;
        }
        let Some(mut rows) = batch.iter().try_fold(0i64, |n, r| n.checked_add(r.rows())) else {
            return;
        };
        let mut i = 0;
        while i < self.requests.len() && batch.len() < max {
            let r = &self.requests[i];
            match rows.checked_add(r.rows()) {
                Some(sum) if r.fits(&batch[0]) => {
                    rows = sum;
                    batch.extend(self.requests.remove(i));
                }
                _ => i += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dims: &[i64], kind: Kind) -> Tensor {
        Tensor::zeros(dims, (kind, Device::Cpu))
    }

    #[test]
    fn shapes_agree_on_everything_but_the_rows() {
        let a = Shape::of(&[t(&[3, 4], Kind::Float), t(&[3], Kind::Int64)]).unwrap();
        let b = Shape::of(&[t(&[1, 4], Kind::Float), t(&[1], Kind::Int64)]).unwrap();
        assert_eq!((a.rows, b.rows), (3, 1));
        assert_eq!(a.inputs, b.inputs);
        let c = Shape::of(&[t(&[1, 5], Kind::Float), t(&[1], Kind::Int64)]).unwrap();
        assert_ne!(a.inputs, c.inputs);
        let d = Shape::of(&[t(&[1, 4], Kind::Double), t(&[1], Kind::Int64)]).unwrap();
        assert_ne!(b.inputs, d.inputs);
    }

    #[test]
    fn inputs_without_rows_or_with_different_rows_are_not_batched() {
        assert!(Shape::of(&[]).is_none());
        assert!(Shape::of(&[Tensor::from(1.0f32)]).is_none());
        assert!(Shape::of(&[t(&[0, 4], Kind::Float)]).is_none());
        assert!(Shape::of(&[t(&[2, 4], Kind::Float), t(&[3], Kind::Float)]).is_none());
    }
}
