//! The batched server's control requests: what the debug routes, the
//! warm-up and `x-debug-fault` ask of the batcher's threads, registered
//! under a number that a 0-dim `int64` marker input names; the batcher's
//! forward that tells them from requests; and the tickets that take a
//! control back out of the registry when its route goes.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;

use tch::{Device, Kind, TchError, Tensor};
use tch_scope::ScopeError;
use tch_scope::batch::{BatchError, Ticket as BatchTicket};
use tokio::sync::oneshot;

use crate::debug_headers::{Fault, Ran};
use crate::flags::Args;
use crate::model::{MODEL, Model, refused};
use crate::workers::{
    DEBUG_WAIT, Gate, Meeting, Phase, ThreadState, WorkerReport, Workers, state_with,
};

/// What a control request makes the worker that takes it do.
pub(crate) enum Control {
    /// The warm-up forward, once per worker (each waits at the meeting,
    /// bounded, so that every worker takes one).
    WarmUp {
        meeting: Arc<Meeting>,
        shape: Vec<i64>,
    },
    /// `/debug/workers`: as [`Job::Check`](crate::pool::Job::Check).
    Check {
        meeting: Arc<Meeting>,
        reply: tokio::sync::mpsc::UnboundedSender<Result<WorkerReport, String>>,
    },
    /// `/debug/pause`: holds the worker until the gate opens.
    Pause(Arc<Gate>),
    /// `x-debug-fault` on a request (the control is its second input):
    /// done before its forward. `died` hears which worker a `die` ended.
    Fault {
        fault: Fault,
        died: Option<oneshot::Sender<usize>>,
    },
}

/// What the batcher's forward shares with the routes.
pub(crate) struct Controls {
    next: AtomicI64,
    ops: Mutex<HashMap<i64, Control>>,
    pub(crate) workers: Arc<Workers>,
    /// Each worker's state at its first control request (the warm-up or
    /// a check; both are submitted from a thread with no scope open).
    at_start: Vec<OnceLock<Result<ThreadState, String>>>,
    /// Each worker's model forwards (a batch counts once).
    jobs: Vec<AtomicU64>,
    /// `--intra-op-threads`, set on each worker's own thread.
    threads: i32,
    /// Where a worker ended by `x-debug-fault: die` waits (never taking a
    /// request again) until shutdown opens it.
    pub(crate) graveyard: Gate,
    /// `--debug`: each request's forward adds a [`Ran`] output.
    pub(crate) debug: bool,
    /// The next forward's number in its [`Ran`] (`--debug` only).
    forwards: AtomicI64,
}

/// A batcher thread's worker number, known from its first forward on;
/// dropped with the thread's locals when the thread ends, however it
/// ends, which marks the worker gone (`/healthz` names it).
struct WorkerMark {
    id: usize,
    workers: Arc<Workers>,
}

impl Drop for WorkerMark {
    fn drop(&mut self) {
        self.workers.set(self.id, Phase::Gone);
    }
}

thread_local! {
    /// This batcher thread's worker, once known.
    static WORKER: std::cell::RefCell<Option<WorkerMark>> = const { std::cell::RefCell::new(None) };
}

/// The batcher's thread names: `model-worker-N`, as the pool's.
pub(crate) const WORKER_NAME: &str = "model-worker";

impl Controls {
    /// Nothing registered yet, for `args.workers` workers.
    pub(crate) fn new(workers: Arc<Workers>, args: &Args) -> Self {
        let n = args.workers;
        Self {
            next: AtomicI64::new(0),
            ops: Mutex::new(HashMap::new()),
            workers,
            at_start: (0..n).map(|_| OnceLock::new()).collect(),
            jobs: (0..n).map(|_| AtomicU64::new(0)).collect(),
            threads: args.intra_op_threads,
            graveyard: Gate::default(),
            debug: args.debug,
            forwards: AtomicI64::new(0),
        }
    }

    /// Registers `op`; the marker tensor that names it.
    pub(crate) fn add(&self, op: Control) -> Result<(i64, Tensor), TchError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let marker = Tensor::f_scalar_tensor(id, (Kind::Int64, Device::Cpu))?;
        self.lock().insert(id, op);
        Ok((id, marker))
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Control>> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The control `t` names, if `t` is a marker: `Some(None)` when the
    /// control is no longer registered (its ticket was dropped: nothing to
    /// do). A control is taken once.
    fn take(&self, t: &Tensor) -> Option<Option<Control>> {
        if t.dim() != 0 || t.f_kind().ok() != Some(Kind::Int64) {
            return None;
        }
        let id = t.f_int64_value(&[]).ok()?;
        Some(self.lock().remove(&id))
    }

    /// Control requests registered and not yet taken (`/debug/workers`).
    pub(crate) fn pending(&self) -> usize {
        self.lock().len()
    }

    /// This thread's worker number; on its first call, its intra-op
    /// thread count is set and the thread marked, to be reported gone
    /// when it ends.
    fn worker(&self) -> usize {
        WORKER.with(|w| {
            if let Some(mark) = &*w.borrow() {
                return mark.id;
            }
            tch::set_num_threads(self.threads);
            let id = std::thread::current()
                .name()
                .and_then(|n| n.strip_prefix(WORKER_NAME)?.strip_prefix('-')?.parse().ok())
                .unwrap_or(0usize)
                .min(self.jobs.len() - 1);
            *w.borrow_mut() = Some(WorkerMark {
                id,
                workers: Arc::clone(&self.workers),
            });
            id
        })
    }

    fn record_start(&self, id: usize, m: &impl Model) {
        self.at_start[id]
            .get_or_init(|| m.training().and_then(state_with).map_err(|e| e.to_string()));
    }

    /// The model's forward, counted; a success marks the worker warmed.
    fn run_model(
        &self,
        id: usize,
        m: &impl Model,
        xs: &[Tensor],
    ) -> Result<Vec<Tensor>, ScopeError> {
        let r = m.forward_batch(xs);
        self.jobs[id].fetch_add(1, Ordering::Relaxed);
        if r.is_ok() {
            self.workers.slots[id].warmed.store(true, Ordering::Relaxed);
        }
        r
    }

    /// The model's forward for requests (a batch or one alone); with
    /// `--debug`, its [`Ran`] after the model's outputs, as many rows as
    /// the input has (one without a dim 0: such a request runs alone).
    fn run_requests(
        &self,
        id: usize,
        m: &impl Model,
        xs: &[Tensor],
    ) -> Result<Vec<Tensor>, ScopeError> {
        if !self.debug {
            return self.run_model(id, m, xs);
        }
        let ran = Ran::here(&self.forwards);
        let mut ys = self.run_model(id, m, xs)?;
        let rows = xs.first().and_then(|x| x.size().first().copied());
        let info = ran
            .output(rows.unwrap_or(1).max(1))
            .map_err(|e| ScopeError::new("serve::debug", None, e.to_string()))?;
        ys.push(info);
        Ok(ys)
    }

    /// A control request on worker `id`.
    fn control(&self, id: usize, m: &impl Model, op: Control) {
        match op {
            Control::WarmUp { meeting, shape } => {
                self.record_start(id, m);
                meeting.arrive(DEBUG_WAIT);
                // As requests run: inside `inference_mode`.
                let r = tch_scope::scoped!(inference_mode => {
                    Tensor::f_zeros(shape.as_slice(), (Kind::Float, Device::Cpu))
                        .map_err(|e| ScopeError::new(MODEL, None, e.to_string()))
                        .and_then(|x| self.run_model(id, m, &[x]))
                });
                if let Err(e) = r {
                    eprintln!(
                        "serve: worker {id}: the warm-up forward on zeros of shape {shape:?} \
                         failed ({}); ready after its first request",
                        refused(e.reason()).message
                    );
                }
                self.workers.set(id, Phase::Idle);
            }
            Control::Check { meeting, reply } => {
                self.record_start(id, m);
                if reply.is_closed() {
                    meeting.cancel();
                    return;
                }
                if !meeting.arrive(DEBUG_WAIT) {
                    let _ = reply.send(Err(format!(
                        "worker {id}: not every worker took a check within {DEBUG_WAIT:?}"
                    )));
                    return;
                }
                let now = m.training().and_then(state_with);
                let report = match (self.at_start[id].get(), now) {
                    (Some(Ok(a)), Ok(now)) => Ok(WorkerReport {
                        worker: id,
                        jobs: self.jobs[id].load(Ordering::Relaxed),
                        at_start: a.clone(),
                        now,
                    }),
                    (Some(Err(e)), _) => Err(format!("worker {id} at its start: {e}")),
                    (_, Err(e)) => Err(format!("worker {id}: {e}")),
                    (None, _) => Err(format!("worker {id}: no state at its start")),
                };
                let _ = reply.send(report);
            }
            Control::Pause(gate) => {
                self.workers.set(id, Phase::Paused);
                gate.hold();
                self.workers.set(id, Phase::Idle);
            }
            // A fault comes as a request's second input, not alone.
            Control::Fault { .. } => {}
        }
    }
}

/// Busy while it lives (a forward, a fault's sleep); idle after, unless
/// the worker is gone.
struct Busy<'a> {
    workers: &'a Workers,
    id: usize,
}

impl<'a> Busy<'a> {
    fn new(workers: &'a Workers, id: usize) -> Self {
        workers.set(id, Phase::Busy);
        Self { workers, id }
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        if self.workers.phase(self.id).0 != Phase::Gone {
            self.workers.set(self.id, Phase::Idle);
        }
    }
}

/// The batcher's forward: a control request, a request with a fault, or
/// a batch of requests (their inputs concatenated along dim 0).
pub(crate) fn batched_forward(
    c: &Controls,
    m: &impl Model,
    xs: &[Tensor],
) -> Result<Vec<Tensor>, ScopeError> {
    let id = c.worker();
    match xs {
        [ctl] if ctl.dim() == 0 => {
            match c.take(ctl) {
                Some(Some(op)) => c.control(id, m, op),
                // Its ticket was dropped as the worker took it.
                Some(None) => {}
                None => {
                    let _busy = Busy::new(&c.workers, id);
                    return c.run_requests(id, m, xs);
                }
            }
            Ok(Vec::new())
        }
        [x, ctl] if ctl.dim() == 0 => {
            let _busy = Busy::new(&c.workers, id);
            if let Some(Some(Control::Fault { fault, died })) = c.take(ctl) {
                match fault {
                    Fault::Panic(message) => panic!("{message}"),
                    Fault::Sleep(d) => std::thread::sleep(d),
                    Fault::Die => {
                        // The request hears first (its handler marks the
                        // worker gone before it answers, so /healthz says
                        // so by then); the thread takes nothing more.
                        if let Some(tx) = died {
                            let _ = tx.send(id);
                        }
                        c.workers.set(id, Phase::Gone);
                        c.graveyard.hold();
                        return Err(ScopeError::new("serve::worker", None, "the worker is gone"));
                    }
                }
            }
            c.run_requests(id, m, std::slice::from_ref(x))
        }
        _ => {
            let _busy = Busy::new(&c.workers, id);
            c.run_requests(id, m, xs)
        }
    }
}

/// Removes a request's fault from the registry when the request ends
/// (taken or not).
pub(crate) struct Registered<'a>(pub(crate) &'a Controls, pub(crate) Option<i64>);

/// A control request's ticket: dropping it cancels the request if no
/// worker has taken it, and removes its control from the registry, so a
/// route whose client left leaves nothing behind. Awaiting it waits until
/// a worker has done the control.
pub(crate) struct ControlTicket {
    /// `None`: already done when it was submitted.
    pub(crate) ticket: Option<BatchTicket>,
    pub(crate) id: i64,
    pub(crate) controls: Arc<Controls>,
}

impl Drop for ControlTicket {
    fn drop(&mut self) {
        // Before the ticket itself goes: a worker that takes the request
        // in between finds no control and does nothing.
        self.controls.lock().remove(&self.id);
    }
}

impl Future for ControlTicket {
    type Output = Result<Vec<Tensor>, BatchError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        match &mut self.ticket {
            Some(t) => Pin::new(t).poll(cx),
            None => Poll::Ready(Ok(Vec::new())),
        }
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.1 {
            self.0.lock().remove(&id);
        }
    }
}
