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
//!   early when the batch is full, when another worker becomes idle, or
//!   at the earliest deadline in the batch.
//! - **Only equal scope states share a batch.** Requests are batched only
//!   with requests whose captured state is the same
//!   ([`Context::same_state`]: grad mode, inference mode, autocast, current
//!   device); different states form different batches. The worker enters
//!   the batch's context around the forward: the captured state is the
//!   whole state there, as with `with(ctx)` (no `inference_mode` is added:
//!   submit from an `inference_mode` scope to serve with it).
//! - **Concatenated along dim 0.** Each input of the batch is the
//!   requests' inputs concatenated along dim 0; only requests whose inputs
//!   agree in number, dtype, device and every other dim are batched
//!   together (others form other batches, and a request whose inputs have
//!   no dim 0, or disagree on their row count, runs alone). Every output of
//!   the forward must keep the batch's rows first: it is split back per
//!   request by their row counts. Several inputs and outputs work.
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
//!
//! `max_batch(1)` turns batching off: every request runs alone, its inputs
//! and outputs untouched.
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
//!             // Submitted inside inference_mode: computed inside it.
//!             let y = scoped!(inference_mode => batcher.submit(vec![x])).wait().unwrap();
//!             assert_eq!(y[0].double_value(&[0, 2]), 2.0 * i as f64);
//!         })
//!     })
//!     .collect();
//! for t in threads {
//!     t.join().unwrap();
//! }
//! assert_eq!(batcher.stats().inferences, 4);
//! ```

mod queue;
mod ticket;

#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "metrics")]
pub use metrics::describe_metrics;
#[cfg(all(test, feature = "metrics"))]
mod tests;

pub use ticket::Ticket;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tch::Tensor;

use self::queue::{Queue, Request, Shape};
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
    /// The batcher shut down, or its worker died, before answering.
    #[error("the batcher closed before answering the request")]
    Closed,
}

/// A [`Batcher`]'s settings: `BatchOptions::new().max_batch(16)`.
#[derive(Debug, Clone)]
pub struct BatchOptions {
    max_batch: usize,
    max_delay: Duration,
    workers: usize,
    name: &'static str,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchOptions {
    /// `max_batch` 32, `max_delay` 2 ms, 1 worker, named `"batch"`.
    pub fn new() -> Self {
        Self {
            max_batch: 32,
            max_delay: Duration::from_millis(2),
            workers: 1,
            name: "batch",
        }
    }

    /// At most `n` requests a batch (0 counts as 1). 1 turns batching off:
    /// every request runs alone, its inputs and outputs untouched.
    pub fn max_batch(mut self, n: usize) -> Self {
        self.max_batch = n.max(1);
        self
    }

    /// How long a worker may wait for more requests to join a batch it
    /// holds, when no other worker is idle and the batcher is loaded (see
    /// the [module docs](self)). Zero: never waits.
    pub fn max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// How many worker threads compute batches (0 counts as 1).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n.max(1);
        self
    }

    /// The batcher's name: its workers' thread names, its trace span and
    /// its metrics' `name` label.
    pub fn name(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }
}

/// A batcher's counts since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchStats {
    /// Requests submitted.
    pub submitted: u64,
    /// Requests computed with success (Triton's inference count).
    pub inferences: u64,
    /// Forward runs with success, batched or alone (Triton's execution
    /// count): `inferences / executions` is the mean batch size.
    pub executions: u64,
    /// The most requests one successful forward computed.
    pub largest_batch: u64,
    /// Requests removed uncomputed because their deadline had passed.
    pub expired: u64,
    /// Requests removed uncomputed because their ticket was dropped.
    pub cancelled: u64,
    /// Requests answered with an error of their own forward.
    pub failed: u64,
    /// Batches that failed and whose requests then ran one by one.
    pub split_batches: u64,
}

#[derive(Default)]
struct Counts {
    submitted: AtomicU64,
    inferences: AtomicU64,
    executions: AtomicU64,
    largest_batch: AtomicU64,
    expired: AtomicU64,
    cancelled: AtomicU64,
    failed: AtomicU64,
    split_batches: AtomicU64,
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
    counts: Counts,
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
    /// [`package_forward`] are such forwards.
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
            counts: Counts::default(),
        });
        let mut this = Batcher {
            shared,
            workers: Vec::new(),
        };
        for i in 0..this.shared.options.workers {
            let shared = Arc::clone(&this.shared);
            let worker = std::thread::Builder::new()
                .name(format!("{}-{i}", this.shared.options.name))
                .spawn(move || work(&shared))
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
    /// is answered [`BatchError::Expired`] without being computed.
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
        let shape = if self.shared.options.max_batch > 1 {
            Shape::of(&inputs)
        } else {
            None
        };
        let (ticket, slot) = Ticket::new();
        let request = Request {
            inputs,
            ctx,
            deadline,
            arrived: Instant::now(),
            shape,
            slot,
            flow: crate::trace::flow_start(),
        };
        self.shared.counts.submitted.fetch_add(1, Ordering::Relaxed);
        let (wake_worker, wake_gatherers) = {
            let mut q = self.shared.lock();
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
        let c = &self.shared.counts;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BatchStats {
            submitted: get(&c.submitted),
            inferences: get(&c.inferences),
            executions: get(&c.executions),
            largest_batch: get(&c.largest_batch),
            expired: get(&c.expired),
            cancelled: get(&c.cancelled),
            failed: get(&c.failed),
            split_batches: get(&c.split_batches),
        }
    }

    /// Requests waiting for a worker.
    pub fn queued(&self) -> usize {
        self.shared.lock().requests.len()
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
            // A worker's panic was its own (requests are answered by their
            // drop); nothing to add here.
            let _ = w.join();
        }
    }
}

impl<M: Servable> Shared<M> {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue stays whole if a thread panicked holding the lock
        // (nothing in between leaves it half-changed).
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn count(&self, counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counts a forward as running until the value is dropped.
    fn computing(&self) -> Computing<'_> {
        self.computing.fetch_add(1, Ordering::SeqCst);
        Computing(&self.computing)
    }

    /// One forward that answered `n` requests with success.
    fn executed(&self, n: usize) {
        let c = &self.counts;
        self.count(&c.inferences, n as u64);
        self.count(&c.executions, 1);
        c.largest_batch.fetch_max(n as u64, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::executed(self.options.name, n as u64);
    }
}

/// A worker thread: takes batches from the queue until it is closed and
/// empty.
fn work<M: Servable>(shared: &Shared<M>) {
    let mut span = Record::new(shared.options.name);
    let max = shared.options.max_batch;
    let delay = shared.options.max_delay;
    let mut q = shared.lock();
    // Whether this worker waited idle for its next request (else it comes
    // from computing a batch, and what it finds queued came meanwhile).
    let mut rested = true;
    loop {
        while q.requests.is_empty() {
            if q.closed {
                return;
            }
            q.idle += 1;
            if q.gathering > 0 {
                // An idle worker: a batch held for more should go now.
                shared.gather.notify_all();
            }
            q = shared.work.wait(q).unwrap_or_else(PoisonError::into_inner);
            q.idle -= 1;
            rested = true;
        }
        // Requests (more than one) that queued while this worker computed
        // (and, checked below, no other was idle): the batcher is loaded.
        // One request alone may just be the next of a caller answered a
        // moment ago: it is lone, and does not wait.
        let backlog = !rested && q.requests.len() > 1;
        let mut batch = Vec::with_capacity(max.min(q.requests.len()));
        batch.extend(q.requests.pop_front());
        q.take_fitting(&mut batch, max);
        let wait = batch.len() < max
            && !delay.is_zero()
            && batch[0].shape.is_some()
            && q.idle == 0
            && (shared.computing.load(Ordering::SeqCst) > 0 || backlog)
            && !q.closed;
        if wait {
            let mut until = Instant::now() + delay;
            if let Some(d) = batch.iter().filter_map(|r| r.deadline).min() {
                until = until.min(d);
            }
            q.gathering += 1;
            loop {
                let now = Instant::now();
                if batch.len() >= max || q.closed || q.idle > 0 || now >= until {
                    break;
                }
                q = shared
                    .gather
                    .wait_timeout(q, until - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                q.take_fitting(&mut batch, max);
            }
            q.gathering -= 1;
        }
        if !q.requests.is_empty() && q.idle > 0 {
            // What this batch left (other states, other shapes) for another.
            shared.work.notify_one();
        }
        drop(q);
        run_batch(shared, batch, &mut span);
        q = shared.lock();
        rested = false;
    }
}

/// Removes the expired and cancelled requests, then computes the rest
/// together (or one by one if that fails) and answers each.
fn run_batch<M: Servable>(shared: &Shared<M>, batch: Vec<Request>, span: &mut Record) {
    let now = Instant::now();
    let (mut expired, mut cancelled) = (Vec::new(), 0);
    let mut live = Vec::with_capacity(batch.len());
    for r in batch {
        if r.slot.is_gone() {
            cancelled += 1;
        } else if r.expired(now) {
            expired.push(r);
        } else {
            live.push(r);
        }
    }
    // Counted before they are answered: whoever reads an answer reads
    // the counts too.
    shared.count(&shared.counts.cancelled, cancelled);
    shared.count(&shared.counts.expired, expired.len() as u64);
    #[cfg(feature = "metrics")]
    metrics::dropped(shared.options.name, expired.len() as u64, cancelled);
    for r in expired {
        let waited = now.saturating_duration_since(r.arrived);
        r.slot.answer(Err(BatchError::Expired { waited }));
    }
    if live.is_empty() {
        return;
    }
    #[cfg(feature = "metrics")]
    metrics::batch(
        shared.options.name,
        live.iter()
            .map(|r| now.saturating_duration_since(r.arrived)),
    );
    let _span = crate::trace::is_recording().then(|| {
        for r in &live {
            if let Some(from) = r.flow {
                crate::trace::flow_end(from);
            }
        }
        let Ok(g) = span.enter();
        g
    });
    if live.len() == 1 {
        run_alone(shared, &live[0]);
        return;
    }
    match run_together(shared, &live) {
        Ok(outputs) => {
            shared.executed(live.len());
            for (r, out) in live.iter().zip(outputs) {
                r.slot.answer(Ok(out));
            }
        }
        Err(e) => {
            shared.count(&shared.counts.split_batches, 1);
            let now = Instant::now();
            let deadline_passed = matches!(&e, BatchError::Failed(s) if s.is_ended())
                && live.iter().all(|r| r.expired(now));
            for r in &live {
                if deadline_passed {
                    // The batch ran to its latest deadline: every
                    // request's own run would end as it did.
                    shared.count(&shared.counts.failed, 1);
                    r.slot.answer(Err(e.clone()));
                } else if r.slot.is_gone() {
                    shared.count(&shared.counts.cancelled, 1);
                    #[cfg(feature = "metrics")]
                    metrics::dropped(shared.options.name, 0, 1);
                } else if r.expired(Instant::now()) {
                    // Late for its own run: answered as if still queued.
                    shared.count(&shared.counts.expired, 1);
                    #[cfg(feature = "metrics")]
                    metrics::dropped(shared.options.name, 1, 0);
                    let waited = now.saturating_duration_since(r.arrived);
                    r.slot.answer(Err(BatchError::Expired { waited }));
                } else {
                    run_alone(shared, r);
                }
            }
        }
    }
}

/// The forward of one request, inputs and outputs untouched, in its own
/// context; answers it.
fn run_alone<M: Servable>(shared: &Shared<M>, r: &Request) {
    let computing = shared.computing();
    let answer: Answer = guarded(|| {
        r.ctx
            .run(|| (shared.forward)(shared.served.get_ref(), &r.inputs))
            .and_then(|out| out)
            .map_err(BatchError::Failed)
    });
    drop(computing);
    match answer {
        Ok(_) => shared.executed(1),
        Err(_) => shared.count(&shared.counts.failed, 1),
    }
    r.slot.answer(answer);
}

/// One forward of the requests' inputs concatenated, in the context of the
/// request with the latest deadline; the outputs split back per request.
fn run_together<M: Servable>(
    shared: &Shared<M>,
    live: &[Request],
) -> Result<Vec<Vec<Tensor>>, BatchError> {
    let rows: Vec<i64> = live
        .iter()
        .map(|r| r.shape.as_ref().map_or(0, |s| s.rows))
        .collect();
    let total: i64 = rows.iter().sum();
    let lead = live
        .iter()
        .max_by_key(|r| (r.deadline.is_none(), r.deadline))
        .expect("a batch has requests");
    let _computing = shared.computing();
    guarded(|| {
        lead.ctx
            .run(|| {
                let failed = |e: tch::TchError| {
                    BatchError::Failed(ScopeError::new("batch", None, e.to_string()))
                };
                let inputs = (0..live[0].inputs.len())
                    .map(|i| {
                        let parts: Vec<&Tensor> = live.iter().map(|r| &r.inputs[i]).collect();
                        Tensor::f_cat(&parts, 0).map_err(failed)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let outputs = (shared.forward)(shared.served.get_ref(), &inputs)
                    .map_err(BatchError::Failed)?;
                let mut each: Vec<Vec<Tensor>> = live
                    .iter()
                    .map(|_| Vec::with_capacity(outputs.len()))
                    .collect();
                for (k, y) in outputs.iter().enumerate() {
                    if y.dim() == 0 || y.size()[0] != total {
                        return Err(BatchError::Failed(ScopeError::new(
                            "batch",
                            None,
                            format!(
                                "output {k} of the batch has shape {:?}, not {total} rows first",
                                y.size()
                            ),
                        )));
                    }
                    let parts = y.f_split_with_sizes(rows.as_slice(), 0).map_err(failed)?;
                    for (mine, part) in each.iter_mut().zip(parts) {
                        mine.push(part);
                    }
                }
                Ok(each)
            })
            .map_err(BatchError::Failed)
            .and_then(|r| r)
    })
}

/// `f`'s value, or its panic as [`BatchError::Panicked`].
fn guarded<T>(f: impl FnOnce() -> Result<T, BatchError>) -> Result<T, BatchError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic with a non-string payload".to_owned());
        Err(BatchError::Panicked(msg))
    })
}

/// A forward for a TorchScript model: [`tch::CModule::forward_is`] on the
/// inputs, its output a tensor or a tuple or list of tensors.
///
/// # Errors
/// The model's error, or an output that is not tensors, as a [`ScopeError`].
pub fn cmodule_forward(m: &tch::CModule, inputs: &[Tensor]) -> Result<Vec<Tensor>, ScopeError> {
    use tch::IValue;
    let error = |reason: String| ScopeError::new("CModule::forward", None, reason);
    let args: Vec<IValue> = inputs
        .iter()
        .map(|x| IValue::Tensor(x.shallow_clone()))
        .collect();
    let tensor = |v: IValue| match v {
        IValue::Tensor(t) => Ok(t),
        other => Err(error(format!("an output is not a tensor: {other:?}"))),
    };
    match m.forward_is(&args).map_err(|e| error(e.to_string()))? {
        IValue::Tensor(t) => Ok(vec![t]),
        IValue::TensorList(ts) => Ok(ts),
        IValue::Tuple(vs) | IValue::GenericList(vs) => vs.into_iter().map(tensor).collect(),
        other => Err(error(format!("the output is not tensors: {other:?}"))),
    }
}

/// A forward for an AOTInductor package: [`Package::run`](crate::aoti::Package::run).
///
/// # Errors
/// The package's [`ScopeError`].
pub fn package_forward(
    p: &crate::aoti::Package,
    inputs: &[Tensor],
) -> Result<Vec<Tensor>, ScopeError> {
    let inputs: Vec<&Tensor> = inputs.iter().collect();
    p.run(&inputs)
}
