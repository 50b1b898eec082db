//! The batched server: requests through a [`Batcher`] whose threads are
//! the model's workers, the debug routes' control requests submitted
//! (`controls.rs` has what the workers do with them), and the shutdown
//! that closes it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use tch::{CModule, TchError, Tensor};
use tch_scope::aoti::Package;
use tch_scope::batch::{self, BatchError, BatchOptions, Batcher, Ticket as BatchTicket};
use tch_scope::{Context, Inference, Servable, Trainable};
use tokio::sync::oneshot;

use crate::answers::{ApiError, no_worker, queue_full, queue_stayed_full};
use crate::controls::{Control, ControlTicket, Controls, Registered, WORKER_NAME, batched_forward};
use crate::debug_headers::{Fault, Ran};
use crate::flags::Args;
use crate::model::{MODEL, Model, input_tensor, read_output, refused};
use crate::requests::{Input, Output};
use crate::workers::{DEBUG_WAIT, Meeting, Phase, Workers};

/// The tch-scope server with `--max-batch` above 1: each request goes to a
/// [`Batcher`] (captured in the handler's scopes, by its deadline), whose
/// `--workers` threads (`model-worker-N`) are the model's workers. The
/// debug routes, the warm-up and `x-debug-fault` reach those threads as
/// control requests: one input, a 0-dim `int64` tensor naming a
/// [`Control`] (never batched: it has no dim 0). A request's own input is
/// always `float`, so it is never taken for one.
///
/// `--queue` is the batcher's own cap ([`BatchOptions::max_queue`]),
/// checked and pushed under the batcher's lock: exact however many
/// handlers submit at once.
pub(crate) struct Batched {
    pub(crate) engine: Arc<BatchEngine>,
    pub(crate) controls: Arc<Controls>,
    /// The warm-up requests' tickets (dropping one would cancel it).
    _warm_ups: Vec<ControlTicket>,
}

/// The batcher over the model's kind.
pub(crate) enum BatchEngine {
    // Shared with the `/v2` routes' engine (`oip.rs`).
    Module(Arc<Batcher<CModule>>),
    Package(Arc<Batcher<Package>>),
}

impl BatchEngine {
    fn submit_in(
        &self,
        ctx: Context,
        inputs: Vec<Tensor>,
        deadline: Option<Instant>,
    ) -> BatchTicket {
        match self {
            Self::Module(b) => b.submit_in(ctx, inputs, deadline),
            Self::Package(b) => b.submit_in(ctx, inputs, deadline),
        }
    }

    pub(crate) fn queued(&self) -> usize {
        match self {
            Self::Module(b) => b.queued(),
            Self::Package(b) => b.queued(),
        }
    }

    /// The batcher's worker threads still running.
    pub(crate) fn live_workers(&self) -> usize {
        match self {
            Self::Module(b) => b.live_workers(),
            Self::Package(b) => b.live_workers(),
        }
    }

    pub(crate) fn stats(&self) -> batch::BatchStats {
        match self {
            Self::Module(b) => b.stats(),
            Self::Package(b) => b.stats(),
        }
    }
}

impl Batched {
    /// Starts the batcher over `served` and queues each worker's warm-up.
    pub(crate) fn start<M: Model + Servable + Send + Sync + 'static>(
        served: Inference<M>,
        args: &Args,
        workers: Arc<Workers>,
        wrap: fn(Batcher<M>) -> BatchEngine,
    ) -> Result<Batched, String> {
        let n = args.workers;
        let controls = Arc::new(Controls::new(workers, args));
        let options = BatchOptions::new()
            .max_batch(args.max_batch)
            .max_delay(args.max_delay)
            .max_queue(args.queue)
            .workers(n)
            .name(WORKER_NAME);
        let c = Arc::clone(&controls);
        let batcher = Batcher::new(Arc::new(served), options, move |m: &M, xs: &[Tensor]| {
            batched_forward(&c, m, xs)
        })
        .map_err(|e| format!("cannot start the batcher: {e}"))?;
        let mut b = Batched {
            engine: Arc::new(wrap(batcher)),
            controls,
            _warm_ups: Vec::with_capacity(n),
        };
        match &args.warmup_shape {
            Some(shape) => {
                let meeting = Arc::new(Meeting::new(n));
                for _ in 0..n {
                    let op = Control::WarmUp {
                        meeting: Arc::clone(&meeting),
                        shape: shape.clone(),
                    };
                    // Its answer is not waited for: the worker's phase and
                    // `warmed` say how it went.
                    let ticket = b.control_blocking(op).map_err(|e| e.message)?;
                    b._warm_ups.push(ticket);
                }
            }
            None => (0..n).for_each(|i| b.controls.workers.set(i, Phase::Idle)),
        }
        Ok(b)
    }

    /// Submits a control request (from a thread with no scope open); its
    /// ticket must be kept until it is taken. `Ok(Err(op))`: the queue is
    /// full (a control counts under `--queue` as a request does), try
    /// again.
    fn try_control(&self, op: Control) -> Result<Result<ControlTicket, Control>, ApiError> {
        let (id, marker) = self
            .controls
            .add(op)
            .map_err(|e| ApiError::internal(format!("cannot build a control request: {e}")))?;
        let mut ticket = ControlTicket {
            ticket: Some(
                self.engine
                    .submit_in(Context::capture(), vec![marker], None),
            ),
            id,
            controls: Arc::clone(&self.controls),
        };
        // Refused at once, or (seldom) already done: `wait` does not block.
        let answer = match ticket.ticket.take_if(|t| t.is_ready()) {
            None => return Ok(Ok(ticket)),
            Some(t) => t.wait(),
        };
        match answer {
            Ok(_) => Ok(Ok(ticket)),
            Err(BatchError::QueueFull { .. }) => match self.controls.lock().remove(&id) {
                Some(op) => Ok(Err(op)),
                None => Err(ApiError::internal("a refused control request was taken")),
            },
            Err(e) => Err(batch_error(e)),
        }
    }

    /// [`try_control`](Self::try_control) until the queue has room, for at
    /// most [`DEBUG_WAIT`] (the start's warm-ups: more workers than
    /// `--queue` need turns).
    fn control_blocking(&self, mut op: Control) -> Result<ControlTicket, ApiError> {
        let until = Instant::now() + DEBUG_WAIT;
        loop {
            match self.try_control(op)? {
                Ok(ticket) => return Ok(ticket),
                Err(_) if Instant::now() >= until => return Err(queue_stayed_full()),
                Err(back) => op = back,
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// [`try_control`](Self::try_control) until the queue has room, at most
    /// until `until` (the debug routes).
    pub(crate) async fn control(
        &self,
        mut op: Control,
        until: Instant,
    ) -> Result<ControlTicket, ApiError> {
        loop {
            match self.try_control(op)? {
                Ok(ticket) => return Ok(ticket),
                Err(_) if Instant::now() >= until => return Err(queue_stayed_full()),
                Err(back) => op = back,
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The batcher's worker threads still running, less those the server
    /// knows are gone (`x-debug-fault: die` holds its thread).
    pub(crate) fn live(&self) -> usize {
        self.controls.workers.live().min(self.engine.live_workers())
    }

    /// One request through the batcher, in `ctx` (the handler's scopes),
    /// by `deadline`; a client that goes drops the ticket, and with it the
    /// request if no worker has taken it. `grad`: `ctx` has grad mode on
    /// (`x-debug-grad: on`), so the input is built outside the handler's
    /// `inference_mode` (an inference tensor cannot be saved for backward)
    /// and requires grad: the request asks the batcher for a graph, and is
    /// computed with grad mode, alone, its input as it is.
    pub(crate) async fn predict(
        &self,
        ctx: Context,
        deadline: Instant,
        input: Input,
        fault: Option<Fault>,
        grad: bool,
    ) -> Result<Output, ApiError> {
        if self.live() == 0 {
            return Err(no_worker());
        }
        // The handler's deadline refuses operators past it: building the
        // input then is the deadline's 504, not a server failure.
        let late = |what: &str, e: Option<TchError>| match Instant::now()
            .checked_duration_since(deadline)
        {
            Some(late) => ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                format!("deadline passed {late:?} ago {what}"),
            ),
            None => ApiError::internal(format!(
                "cannot build the input: {}",
                e.map_or_else(String::new, |e| e.to_string())
            )),
        };
        if Instant::now() >= deadline {
            return Err(late("before the input", None));
        }
        // A request that asks for a graph (grad mode on and an input that
        // requires grad) is computed with grad mode, alone; any other in
        // the batcher's inference mode.
        let x = if grad {
            tch_scope::scoped!(inference_mode(false) => {
                input_tensor(&input).and_then(|mut x| {
                    x.f_requires_grad_(true)
                        .map_err(|e| ApiError::internal(format!("cannot build the input: {e}")))
                })
            })
        } else {
            input_tensor(&input)
        };
        let x = x.map_err(|e| {
            if Instant::now() >= deadline {
                late("building the input", None)
            } else {
                e
            }
        })?;
        let (mut registered, mut died) = (Registered(&self.controls, None), None);
        let inputs = match fault {
            None => vec![x],
            Some(fault) => {
                let (tx, rx) = oneshot::channel();
                let op = Control::Fault {
                    fault,
                    died: Some(tx),
                };
                let (id, marker) = self
                    .controls
                    .add(op)
                    .map_err(|e| late("building the input", Some(e)))?;
                registered.1 = Some(id);
                died = Some(rx);
                vec![x, marker]
            }
        };
        // Subscribed before the submission: a worker that ends after it
        // is seen.
        let mut gone = self.controls.workers.subscribe();
        let ticket = self.engine.submit_in(ctx, inputs, Some(deadline));
        let died = async {
            match died {
                Some(died) => died.await,
                None => std::future::pending().await,
            }
        };
        let answer = tokio::select! {
            // In this order: a worker that a request's own fault ended
            // says so before it is marked gone.
            biased;
            a = ticket => a,
            Ok(worker) = died => {
                // Marked here too, so that /healthz says so by the time
                // the client hears.
                self.controls.workers.set(worker, Phase::Gone);
                return Err(ApiError::internal(format!(
                    "worker {worker} ended while running the request"
                )));
            }
            // No worker left to take it: answered now, not never.
            _ = gone.wait_for(|_| self.live() == 0) => return Err(no_worker()),
        };
        drop(registered);
        let mut ys = answer.map_err(batch_error)?;
        // `--debug`: the forward's last output is its `Ran`.
        let ran = if self.controls.debug {
            ys.pop().map(|t| Ran::read(&t))
        } else {
            None
        };
        let [y] = ys.as_slice() else {
            return Err(ApiError::internal(format!(
                "the model returned {} tensors, not one",
                ys.len()
            )));
        };
        let read = |what: &str, e: ApiError| {
            if Instant::now() >= deadline {
                late(what, None)
            } else {
                e
            }
        };
        let ran = ran.transpose().map_err(|e| {
            read(
                "reading the debug output",
                ApiError::internal(e.to_string()),
            )
        })?;
        let mut out = read_output(y).map_err(|e| read("reading the output", e))?;
        out.ran = ran;
        Ok(out)
    }
}

/// A request's `BatchError` as its answer: expired (never computed) or
/// ended by its deadline 504, refused by the model 422, the queue full or
/// no worker left 503, else 500.
fn batch_error(e: BatchError) -> ApiError {
    match e {
        BatchError::QueueFull { limit } => queue_full(limit),
        BatchError::Closed => no_worker(),
        BatchError::Expired { .. } => ApiError::new(StatusCode::GATEWAY_TIMEOUT, e.to_string()),
        BatchError::Failed(e) if e.is_ended() => e.into(),
        BatchError::Failed(e) if e.scope() == MODEL => refused(e.reason()),
        BatchError::Failed(e) => ApiError::internal(e.to_string()),
        BatchError::Panicked(message) => ApiError::panicked("a model worker", message),
        other => ApiError::internal(other.to_string()),
    }
}

/// Drops the batcher (its workers finish what is queued, then end) and
/// says, as the pool's shutdown does, that the model is back in its modes.
pub(crate) fn close_batcher(engine: Arc<BatchEngine>) {
    let Ok(engine) = Arc::try_unwrap(engine) else {
        return;
    };
    match engine {
        BatchEngine::Module(b) => {
            // The `/v2` routes' share went with the router.
            let Ok(b) = Arc::try_unwrap(b) else {
                return;
            };
            let served = Arc::clone(b.served());
            drop(b);
            if let Ok(served) = Arc::try_unwrap(served) {
                let model = served.into_inner();
                let training = model.modes().map(|m| m.iter().filter(|t| **t).count());
                println!(
                    "stopped; the model is back in its saved modes ({training:?} modules training)"
                );
            }
        }
        BatchEngine::Package(b) => drop(b),
    }
}
