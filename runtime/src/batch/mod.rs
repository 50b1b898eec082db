//! Dynamic batching over an [`Inference`]: requests from many threads (or
//! tasks) computed together, each in the scopes it was submitted in.
//!
//! A [`Batcher`] owns a few worker threads and a queue. A request is its
//! input tensors, the [`Context`] it was submitted in (grad mode,
//! inference mode, autocast, device, deadline) and an optional deadline;
//! [`submit`](Batcher::submit) returns a [`Ticket`] to [`wait`](Ticket::wait)
//! on or to `.await`. Usable from any thread, without an async runtime.
//!
//! What it guarantees:
//! - **A lone request never waits.** A worker that takes a request from an
//!   otherwise idle batcher computes it at once. A worker waits (up to
//!   [`max_delay`](BatchOptions::max_delay)) for more requests to join its
//!   batch only when no other worker is idle and the batcher is loaded:
//!   another worker is running a forward, or more than one request had
//!   queued up while every worker was busy (a single one may be the next
//!   request of a caller answered a moment ago: it is lone). The wait ends
//!   early when the batch is full, when another worker becomes idle, when
//!   no forward runs while another worker holds a batch too (the cores
//!   would sit idle), or at the earliest deadline in the batch.
//! - **Forwards run in inference mode, unless a request asks for a
//!   graph.** The worker enters the batch's context around the forward
//!   (the captured state is the whole state there, as with `with(ctx)`)
//!   and, inside it, `inference_mode`, as [`Inference::run`] does: a
//!   request submitted from a plain thread (grad mode on, no scope open),
//!   from `no_grad` or from `inference_mode` is computed in inference
//!   mode, batched, and its outputs are inference tensors with no graph.
//!   A request asks for a graph by being submitted with grad mode on
//!   (outside `inference_mode`) *and* an input that requires grad (what
//!   autograd needs to give that input a gradient): it is computed with
//!   grad mode, as captured, and always alone.
//! - **Only equal scope states share a batch, and grad never does.**
//!   Requests are batched only with requests whose captured state is the
//!   same ([`Context::same_state`]: grad mode, inference mode, autocast,
//!   current device); different states form different batches. A request
//!   that asks for a graph always runs alone: a batch's outputs are parts
//!   of one forward and would share one autograd graph, so the first
//!   request's `backward()` would free it under the others ("Trying to
//!   backward through the graph a second time"). Alone, its outputs have
//!   a graph of their own, and what it can do with them never depends on
//!   what else was queued.
//! - **Concatenated along dim 0.** Each input of the batch is the
//!   requests' inputs concatenated along dim 0; only requests whose inputs
//!   agree in number, dtype, device and every other dim are batched
//!   together (others form other batches, and a request whose inputs have
//!   no dim 0, or disagree on their row count, runs alone; so do requests
//!   whose rows together would pass `i64::MAX`, which zero-element inputs
//!   can claim). Every output of the forward must keep the batch's rows
//!   first: it is split back per request by their row counts. Several
//!   inputs and outputs work. A request computed alone gets its own
//!   tensors, untouched; a batch gets new ones, made by the concatenation
//!   in the batch's context. So build inputs in the state you submit
//!   from: an input made inside `inference_mode` and submitted with grad
//!   mode on is an inference tensor, which autograd refuses to save
//!   ("Inference tensors cannot be saved for backward").
//! - **Expired and cancelled requests are never computed.** Just before a
//!   batch is computed, a request whose deadline has passed is removed and
//!   answered [`BatchError::Expired`]; one whose [`Ticket`] was dropped is
//!   removed. Both are counted ([`BatchStats`], and the metrics).
//! - **One bad request does not fail the others.** When a batch fails (its
//!   forward returns an error or panics, or an output does not keep the
//!   rows), its requests run again one by one, each in its own context, so
//!   the error reaches only the request that caused it. A deadline bounds
//!   a batch by its latest request's deadline (the batch runs in the
//!   context of that request).
//! - **No request, option or panic ends a worker.** Every panic in a
//!   batch's handling is caught, not only the forward's (a metrics
//!   recorder's, the trace's; an executor's waker that panics when woken
//!   loses no answer either): the batch's requests not answered yet are
//!   answered [`BatchError::Panicked`], and the worker takes the next
//!   batch. Should a worker end anyway (a bug),
//!   [`live_workers`](Batcher::live_workers) counts one less; once the
//!   last has ended, the requests waiting are answered
//!   [`BatchError::Closed`] at once, and so is every later submission:
//!   no request waits for a worker that will not come.
//! - **The queue's cap is exact.** With
//!   [`max_queue(n)`](BatchOptions::max_queue), a request submitted while
//!   `n` wait for a worker is answered [`BatchError::QueueFull`] at once,
//!   uncomputed: the check and the push are one step under the queue's
//!   lock, so any number of threads submitting together never queue more
//!   than `n`.
//!
//! `max_batch(1)` turns batching off: every request runs alone, its inputs
//! and outputs untouched.
//!
//! Each worker runs its forwards on its own intra-op thread count,
//! [`intra_op_threads`](BatchOptions::intra_op_threads) (1 by default: the
//! workers are the parallelism), set on the worker's thread alone: the
//! process's count and every other thread's stay as they were.
//!
//! A model that is `Send` but not `Sync` (a `tch::nn` module trained in
//! Rust) is served in [`Replicas`](crate::Replicas): an
//! `Inference<Replicas<M>>` made by
//! [`Inference::replicated`](crate::Inference::replicated), with at least
//! as many replicas as [`workers`](BatchOptions::workers); the forward
//! takes one with `r.get()`, and each worker keeps to its own (so no
//! forward waits for another).
//!
//! Metrics (the `metrics` feature; label `name`, the batcher's
//! [`name`](BatchOptions::name)): `tch_scope_batch_size` (requests per
//! batch), `tch_scope_batch_queue_seconds` (submission to compute),
//! `tch_scope_batch_expired_total`, `tch_scope_batch_cancelled_total`,
//! `tch_scope_batch_inferences_total` and
//! `tch_scope_batch_executions_total` (Triton's inference and execution
//! counts: their ratio is the mean batch size). While the
//! [trace](crate::trace) records, each request draws a flow from where it
//! was submitted to its batch's span (named after the batcher).
//!
//! ```
//! use std::sync::Arc;
//! use tch::{Device, Kind, Tensor};
//! use tch_scope::batch::{BatchOptions, Batcher};
//! use tch_scope::{Inference, WithMode, scoped};
//!
//! #[derive(Debug)]
//! struct Double; // a `Send + Sync` module
//! impl tch::nn::Module for Double {
//!     fn forward(&self, x: &Tensor) -> Tensor {
//!         x * 2
//!     }
//! }
//!
//! let model = WithMode::new(Double);
//! let served = Arc::new(Inference::new(model).unwrap());
//! let batcher = Arc::new(
//!     Batcher::new(served, BatchOptions::new().max_batch(16), |m, xs| {
//!         Ok(vec![m.forward(&xs[0])])
//!     })
//!     .unwrap(),
//! );
//! let threads: Vec<_> = (0..4)
//!     .map(|i| {
//!         let batcher = Arc::clone(&batcher);
//!         std::thread::spawn(move || {
//!             let x = Tensor::full([1, 3], i as f64, (Kind::Float, Device::Cpu));
//!             // From a plain thread: computed in inference mode.
//!             let y = batcher.submit(vec![x]).wait().unwrap();
//!             assert_eq!(y[0].double_value(&[0, 2]), 2.0 * i as f64);
//!             assert!(y[0].is_inference());
//!         })
//!     })
//!     .collect();
//! for t in threads {
//!     t.join().unwrap();
//! }
//! assert_eq!(batcher.stats().inferences, 4);
//! ```

mod alive;
mod forwards;
mod options;
mod panics;
mod queue;
mod stats;
mod threads;
mod ticket;
mod worker;

#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "metrics")]
pub use metrics::describe_metrics;
#[cfg(all(test, feature = "metrics"))]
mod tests;
#[cfg(test)]
mod tests_common;
#[cfg(test)]
mod tests_ending;
#[cfg(test)]
mod tests_gathering;
#[cfg(test)]
mod tests_threads;

pub use options::BatchOptions;
pub use stats::BatchStats;
pub use ticket::Ticket;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tch::Tensor;

use self::alive::Alive;
use self::queue::{Queue, Request, Shape};
use self::stats::Counts;
use self::ticket::Answer;
use crate::{Context, Inference, Record, Scope, ScopeError, Servable};

/// Why a request has no outputs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// Its deadline passed before it was computed; it never was.
    #[error("deadline passed after {waited:?} in the batch queue; the request was not computed")]
    Expired {
        /// From submission to removal.
        waited: Duration,
    },
    /// Its forward returned an error (computed alone, so the error is its
    /// own), or its context could not be entered, or its deadline ended
    /// the forward.
    #[error(transparent)]
    Failed(ScopeError),
    /// Its forward panicked (computed alone); the panic's message.
    #[error("the forward panicked: {0}")]
    Panicked(String),
    /// The batcher shut down, or its workers ended, before answering: a
    /// request queued when the last worker ended, or submitted after.
    #[error("the batcher closed before answering the request")]
    Closed,
    /// Submitted when [`max_queue`](BatchOptions::max_queue) requests were
    /// already waiting for a worker; answered at once, never computed.
    #[error("the batch queue is full ({limit} requests waiting); the request was not computed")]
    QueueFull {
        /// The cap: [`max_queue`](BatchOptions::max_queue).
        limit: usize,
    },
}

/// The forward a batcher calls: the model and the batch's inputs, in
/// order; the outputs, each with the batch's rows first.
type Forward<M> = dyn Fn(&M, &[Tensor]) -> Result<Vec<Tensor>, ScopeError> + Send + Sync;

struct Shared<M: Servable> {
    served: Arc<Inference<M>>,
    forward: Box<Forward<M>>,
    options: BatchOptions,
    queue: Mutex<Queue>,
    /// Idle workers wait here for a request.
    work: Condvar,
    /// A worker holding a batch waits here for more (or for another
    /// worker to become idle).
    gather: Condvar,
    /// Forwards running now (on any worker): counted down before their
    /// requests are answered, so a caller's next request never finds its
    /// own finished forward still counted.
    computing: AtomicUsize,
    /// Worker threads still running ([`Alive`]).
    live: AtomicUsize,
    counts: Counts,
    /// Test only: batches handled, for `end_worker_at_batch`.
    #[cfg(test)]
    handled: AtomicU64,
}

/// One forward counted in [`Shared::computing`] while it lives.
struct Computing<'a>(&'a AtomicUsize);

impl Drop for Computing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Requests computed together by worker threads over an [`Inference`]
/// (see the [module docs](self) for what it guarantees).
///
/// `Send + Sync`: share it in an `Arc` between request handlers. Dropping
/// it lets the workers compute what is queued, then joins them.
pub struct Batcher<M: Servable + Send + Sync + 'static> {
    shared: Arc<Shared<M>>,
    workers: Vec<JoinHandle<()>>,
}

impl<M: Servable + Send + Sync + 'static> std::fmt::Debug for Batcher<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("options", &self.shared.options)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<M: Servable + Send + Sync + 'static> Batcher<M> {
    /// Starts `options.workers` threads computing batches of `served` with
    /// `forward`, which gets the model and the batch's inputs (each the
    /// requests' inputs concatenated along dim 0) and returns the outputs,
    /// each with the batch's rows first. [`cmodule_forward`] and
    /// [`package_forward`] are such forwards. For a model in
    /// [`Replicas`](crate::Replicas), the forward takes a replica:
    /// `|r, xs| Ok(vec![r.get().forward(&xs[0])])`.
    ///
    /// # Errors
    /// A [`ScopeError`] if a worker thread can't be spawned.
    pub fn new(
        served: Arc<Inference<M>>,
        options: BatchOptions,
        forward: impl Fn(&M, &[Tensor]) -> Result<Vec<Tensor>, ScopeError> + Send + Sync + 'static,
    ) -> Result<Self, ScopeError> {
        let shared = Arc::new(Shared {
            served,
            forward: Box::new(forward),
            options,
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
            gather: Condvar::new(),
            computing: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
            counts: Counts::default(),
            #[cfg(test)]
            handled: AtomicU64::new(0),
        });
        let mut this = Batcher {
            shared,
            workers: Vec::new(),
        };
        for i in 0..this.shared.options.workers {
            // Counted from here; uncounted when the thread ends, or at
            // once if it can't be spawned (the closure is dropped).
            let alive = Alive::new(Arc::clone(&this.shared));
            let worker = std::thread::Builder::new()
                .name(format!("{}-{i}", this.shared.options.name))
                .spawn(move || worker::work(alive.shared()))
                .map_err(|e| {
                    ScopeError::new("batch", None, format!("cannot spawn a worker: {e}"))
                })?; // `this` drops here: the workers started so far end
            this.workers.push(worker);
        }
        Ok(this)
    }

    /// Submits `inputs` in this thread's scopes ([`Context::capture`]),
    /// with the deadline of an open `deadline` scope if any.
    pub fn submit(&self, inputs: Vec<Tensor>) -> Ticket {
        self.submit_in(Context::capture(), inputs, None)
    }

    /// Submits `inputs` to be computed in `ctx`, by `deadline` (the earlier
    /// of it and the context's own deadline counts): past it, the request
    /// is answered [`BatchError::Expired`] without being computed. It is
    /// computed in `ctx` and in inference mode, unless it asks for a
    /// graph (grad mode on in `ctx`, inference mode off, and an input
    /// that requires grad): then with grad mode, and alone.
    ///
    /// Refused at once, uncomputed (the ticket is ready when this returns):
    /// [`BatchError::QueueFull`] when [`max_queue`](BatchOptions::max_queue)
    /// requests are waiting, [`BatchError::Closed`] when no worker is left.
    pub fn submit_in(
        &self,
        ctx: Context,
        inputs: Vec<Tensor>,
        deadline: Option<Instant>,
    ) -> Ticket {
        let deadline = match (deadline, ctx.deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // A request that asks for a graph runs alone (`shape` None): a
        // batch's outputs would share one. Every other runs in inference
        // mode, so a plain thread's request (grad mode on by default) is
        // batched, and pays for no graph.
        let grad = ctx.is_grad_enabled()
            && !ctx.is_inference_mode_enabled()
            && inputs.iter().any(Tensor::requires_grad);
        let shape = if self.shared.options.max_batch > 1 && !grad {
            Shape::of(&inputs)
        } else {
            None
        };
        let (ticket, slot) = Ticket::new();
        let request = Request {
            inputs,
            ctx,
            grad,
            deadline,
            arrived: Instant::now(),
            shape,
            slot,
            flow: crate::trace::flow_start(),
        };
        let limit = self.shared.options.max_queue;
        let (wake_worker, wake_gatherers) = {
            // Checked and pushed under one lock: the cap is exact, and no
            // request is queued once the last worker has gone.
            let mut q = self.shared.lock();
            let refused = if q.closed {
                Some(BatchError::Closed)
            } else if q.requests.len() >= limit {
                Some(BatchError::QueueFull { limit })
            } else {
                None
            };
            if let Some(e) = refused {
                drop(q);
                self.shared.counts.refused.fetch_add(1, Ordering::Relaxed);
                request.slot.answer(Err(e));
                return ticket;
            }
            self.shared.counts.submitted.fetch_add(1, Ordering::Relaxed);
            q.requests.push_back(request);
            (q.idle > 0, q.gathering > 0)
        };
        if wake_worker {
            self.shared.work.notify_one();
        }
        if wake_gatherers {
            self.shared.gather.notify_all();
        }
        ticket
    }

    /// The counts so far.
    pub fn stats(&self) -> BatchStats {
        self.shared.counts.snapshot()
    }

    /// Requests waiting for a worker (at most
    /// [`max_queue`](BatchOptions::max_queue)).
    pub fn queued(&self) -> usize {
        self.shared.lock().requests.len()
    }

    /// Worker threads still running: `options.workers` from the start,
    /// one less for each that ended (for any reason: no request or option
    /// should end one, so below `workers` means a bug met). At 0 the
    /// batcher answers every request [`BatchError::Closed`] at once; a
    /// health check should report it unhealthy then.
    pub fn live_workers(&self) -> usize {
        self.shared.live.load(Ordering::SeqCst)
    }

    /// Its settings.
    pub fn options(&self) -> &BatchOptions {
        &self.shared.options
    }

    /// The model it serves.
    pub fn served(&self) -> &Arc<Inference<M>> {
        &self.shared.served
    }
}

impl<M: Servable + Send + Sync + 'static> Drop for Batcher<M> {
    /// Closes the queue; the workers compute what is queued, then end.
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.work.notify_all();
        self.shared.gather.notify_all();
        for w in self.workers.drain(..) {
            // A worker's panic was its own (its requests were answered
            // `Closed`); nothing to add here.
            if let Err(payload) = w.join() {
                panics::discard(payload);
            }
        }
    }
}

pub use forwards::{cmodule_forward, package_forward};
