//! The worker pool (`--max-batch 1`, and `--plain`): `--workers` threads
//! that take one [`Job`] at a time from a bounded queue (`--queue`) and
//! run the model once per request. `--debug`'s checks and pauses reach the
//! workers as jobs on the same queue.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use tch::{CModule, TchError};
use tch_scope::aoti::Package;
use tch_scope::{Context, Inference};
use tokio::sync::oneshot;

use crate::answers::{ApiError, panic_message};
use crate::debug_headers::Fault;
use crate::flags::Args;
use crate::model::{Model, input_tensor, predict_plain, predict_scoped};
use crate::requests::{Input, Output};
use crate::workers::{
    DEBUG_WAIT, Gate, Meeting, Phase, ThreadState, WorkerReport, Workers, state_with,
};

/// What the pool's workers run the model in.
pub(crate) enum Engine {
    /// tch-scope: eval mode once, `inference_mode` around each call.
    Scoped(Inference<CModule>),
    /// Plain tch: `set_eval()` once, `no_grad` around each call.
    Plain(CModule),
    /// A `.pt2` package, tch-scope: served as it is (no modes),
    /// `inference_mode` around each call.
    ScopedPackage(Inference<Package>),
    /// A `.pt2` package without the scopes: `no_grad` around each call
    /// (tch has no loader of its own for one).
    PlainPackage(Package),
}

impl Engine {
    /// Plain tch (`--plain`), none of the scopes.
    pub(crate) fn plain(&self) -> bool {
        matches!(self, Engine::Plain(_) | Engine::PlainPackage(_))
    }
}

/// How a job knows its deadline.
pub(crate) enum Ticket {
    /// The handler's scopes (inference mode, the deadline), entered here.
    Scoped(Context),
    /// The deadline as an instant, checked by hand between steps.
    Plain(Instant),
}

/// What a pool worker takes from the queue: a request, or a `--debug`
/// route's check or pause.
pub(crate) enum Job {
    /// A request: its answer goes back on `reply`.
    Predict {
        ticket: Ticket,
        input: Input,
        fault: Option<Fault>,
        reply: oneshot::Sender<Result<Output, ApiError>>,
    },
    /// Each worker takes exactly one: it waits at the meeting (bounded)
    /// until every worker has taken its own.
    Check {
        meeting: Arc<Meeting>,
        reply: tokio::sync::mpsc::UnboundedSender<Result<WorkerReport, String>>,
    },
    /// Holds the worker until the gate opens.
    Pause(Arc<Gate>),
}

/// Marks its worker gone when the thread ends, by return or by panic.
struct Alive<'a> {
    workers: &'a Workers,
    id: usize,
}

impl Drop for Alive<'_> {
    fn drop(&mut self) {
        self.workers.set(self.id, Phase::Gone);
    }
}

fn thread_state(engine: &Engine) -> Result<ThreadState, TchError> {
    let model_training = match engine {
        Engine::Scoped(served) => served.get_ref().training()?,
        Engine::Plain(model) => model.training()?,
        Engine::ScopedPackage(served) => served.get_ref().training()?,
        Engine::PlainPackage(model) => model.training()?,
    };
    state_with(model_training)
}

/// One forward of zeros, the way requests run: TorchScript's first calls
/// profile and optimize the graph, so they are slow (`/readyz` waits for
/// it). Only whether the model ran matters, not its output.
fn warm_up(engine: &Engine, shape: &[i64]) -> Result<(), ApiError> {
    let n = shape.iter().product::<i64>();
    let input = Input {
        shape: shape.to_vec(),
        data: vec![0.0; usize::try_from(n).unwrap_or(0)],
    };
    fn run(m: &impl Model, input: &Input) -> Result<(), ApiError> {
        m.forward_one(input_tensor(input)?).map(drop)
    }
    match engine {
        Engine::Scoped(served) => served.run(|m| run(m, &input)),
        Engine::Plain(model) => tch::no_grad(|| run(model, &input)),
        Engine::ScopedPackage(served) => served.run(|m| run(m, &input)),
        Engine::PlainPackage(model) => tch::no_grad(|| run(model, &input)),
    }
}

struct WorkerCtx {
    id: usize,
    jobs: Arc<Mutex<Receiver<Job>>>,
    engine: Arc<Engine>,
    depth: Arc<AtomicUsize>,
    workers: Arc<Workers>,
    warmup: Option<Vec<i64>>,
    /// `--intra-op-threads`, set again on the worker's own thread: OpenMP's
    /// thread count is per thread, and a `.pt2` package's kernels (its
    /// `at::cpu::addmm_out`) read the calling thread's, which a new thread
    /// has at the default (every core) until ATen's first `parallel_for`.
    threads: i32,
}

fn worker_loop(w: WorkerCtx) {
    let WorkerCtx {
        id,
        jobs,
        engine,
        depth,
        workers,
        warmup,
        threads,
    } = w;
    tch::set_num_threads(threads);
    let _alive = Alive {
        workers: &workers,
        id,
    };
    let slot = &workers.slots[id];
    let at_start = thread_state(&engine);
    if let Some(shape) = warmup {
        match warm_up(&engine, &shape) {
            Ok(()) => slot.warmed.store(true, Ordering::Relaxed),
            Err(e) => eprintln!(
                "serve: worker {id}: the warm-up forward on zeros of shape {shape:?} failed \
                 ({}); ready after its first request",
                e.message
            ),
        }
    }
    workers.set(id, Phase::Idle);
    let mut done: u64 = 0;
    loop {
        // One worker waits on the queue at a time; the lock is released
        // as soon as it has a job.
        let job = jobs.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok(job) = job else { break };
        match job {
            Job::Predict {
                ticket,
                input,
                fault,
                reply,
            } => {
                depth.fetch_sub(1, Ordering::Relaxed);
                // The handler is gone (its client closed the connection,
                // or the server stopped): nobody would read the answer.
                if reply.is_closed() {
                    metrics::counter!("serve_jobs_skipped_total", "reason" => "client_gone")
                        .increment(1);
                    continue;
                }
                workers.set(id, Phase::Busy);
                let r = catch_unwind(AssertUnwindSafe(|| {
                    match &fault {
                        Some(Fault::Panic(m)) => panic!("{m}"),
                        Some(Fault::Sleep(d)) => std::thread::sleep(*d),
                        _ => {}
                    }
                    match (&*engine, &ticket) {
                        (Engine::Scoped(served), Ticket::Scoped(ctx)) => {
                            predict_scoped(served, ctx, &input)
                        }
                        (Engine::Plain(model), Ticket::Plain(deadline)) => {
                            predict_plain(model, *deadline, &input)
                        }
                        (Engine::ScopedPackage(served), Ticket::Scoped(ctx)) => {
                            predict_scoped(served, ctx, &input)
                        }
                        (Engine::PlainPackage(model), Ticket::Plain(deadline)) => {
                            predict_plain(model, *deadline, &input)
                        }
                        _ => Err(ApiError::internal("a job for the other server")),
                    }
                }));
                let r = r.unwrap_or_else(|p| {
                    Err(ApiError::panicked(
                        &format!("worker {id}"),
                        panic_message(&*p),
                    ))
                });
                if r.is_ok() {
                    slot.warmed.store(true, Ordering::Relaxed);
                }
                done += 1;
                if matches!(fault, Some(Fault::Die)) {
                    // Gone before the client hears: /healthz says so at once.
                    workers.set(id, Phase::Gone);
                    let _ = reply.send(Err(ApiError::internal(format!(
                        "worker {id} ended while running the request"
                    ))));
                    panic!("worker {id} ended by x-debug-fault: die");
                }
                workers.set(id, Phase::Idle);
                // The client may have gone since: nobody to answer.
                let _ = reply.send(r);
            }
            Job::Check { meeting, reply } => {
                depth.fetch_sub(1, Ordering::Relaxed);
                if reply.is_closed() {
                    meeting.cancel();
                    continue;
                }
                if !meeting.arrive(DEBUG_WAIT) {
                    let _ = reply.send(Err(format!(
                        "worker {id}: not every worker took a check within {DEBUG_WAIT:?}"
                    )));
                    continue;
                }
                let report = match (&at_start, thread_state(&engine)) {
                    (Ok(a), Ok(now)) => Ok(WorkerReport {
                        worker: id,
                        jobs: done,
                        at_start: a.clone(),
                        now,
                    }),
                    (Err(e), _) => Err(format!("worker {id} at its start: {e}")),
                    (_, Err(e)) => Err(format!("worker {id}: {e}")),
                };
                let _ = reply.send(report);
            }
            Job::Pause(gate) => {
                depth.fetch_sub(1, Ordering::Relaxed);
                workers.set(id, Phase::Paused);
                gate.hold();
                workers.set(id, Phase::Idle);
            }
        }
    }
}

/// A started pool: its queue's sending side (no receiver is left without
/// an engine), the jobs sent and not yet taken, and its threads.
pub(crate) struct Started {
    pub(crate) jobs: SyncSender<Job>,
    pub(crate) depth: Arc<AtomicUsize>,
    pub(crate) threads: Vec<JoinHandle<()>>,
}

/// The pool's queue (`--queue` jobs) and threads over `engine`,
/// `--workers` of them; none without an engine (the batcher has threads
/// of its own).
pub(crate) fn start(
    args: &Args,
    engine: Option<&Arc<Engine>>,
    workers: &Arc<Workers>,
) -> Result<Started, String> {
    let (tx, rx) = sync_channel::<Job>(args.queue);
    let rx = Arc::new(Mutex::new(rx));
    let depth = Arc::new(AtomicUsize::new(0));
    let threads = match engine {
        None => Vec::new(),
        Some(engine) => (0..args.workers)
            .map(|id| {
                let w = WorkerCtx {
                    id,
                    jobs: Arc::clone(&rx),
                    engine: Arc::clone(engine),
                    depth: Arc::clone(&depth),
                    workers: Arc::clone(workers),
                    warmup: args.warmup_shape.clone(),
                    threads: args.intra_op_threads,
                };
                std::thread::Builder::new()
                    .name(format!("model-worker-{id}"))
                    .spawn(move || worker_loop(w))
                    .map_err(|e| format!("cannot start a worker: {e}"))
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(Started {
        jobs: tx,
        depth,
        threads,
    })
}
