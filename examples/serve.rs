//! An HTTP inference server: axum on a multi-thread tokio runtime, a
//! TorchScript model (one float tensor in, one out) run by a pool of
//! worker threads fed by a bounded queue (docs/serving.md).
//!
//! ```text
//! cargo run --release -p examples --example serve -- --addr 127.0.0.1:8080 \
//!     [--model PATH] [--workers N] [--queue N] [--plain] [--debug]
//! ```
//!
//! - `POST /predict` `{"shape": [n, …], "data": [f32, …]}` (row-major) →
//!   `{"shape": […], "data": […]}`. The header `x-deadline-ms` gives the
//!   request's budget from its arrival (default `--deadline-ms`). 504 once
//!   the deadline has passed (queued time counts), 400 for a malformed
//!   request, 503 when the queue is full.
//! - `GET /metrics` (Prometheus text), `GET /healthz`.
//! - With `--debug`: `GET /debug/workers` (each worker's grad mode,
//!   inference mode and the model's modes, at its start and now),
//!   `POST /debug/pause` and `POST /debug/resume` (hold every worker, so
//!   that tests can fill the queue).
//!
//! The tch-scope server: the handler is an attributed `async fn`
//! (`inference_mode`, `timed`, `deadline(until = arrival + budget)`); it
//! captures its [`Context`] and queues it with the input; a worker enters
//! it and runs the model in an [`Inference`] handle. `--plain` serves the
//! same with plain tch: `tch::no_grad`, the model put in eval once, the
//! time taken by hand, the deadline checked by hand between steps.

#[path = "common/floats.rs"]
mod floats;

use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tch::{CModule, Device, Kind, TchError, Tensor};
use tch_scope::{
    Context, Inference, ScopeError, Trainable, is_grad_enabled, is_inference_mode_enabled, scope,
};
use tokio::sync::oneshot;

const USAGE: &str = "usage: serve [--addr HOST:PORT] [--model PATH] [--workers N] [--queue N] \
[--plain] [--body-limit BYTES] [--deadline-ms MS] [--intra-op-threads N] [--debug]";

/// The model `scripts/export_models.py` exports with the bootstrap's
/// PyTorch: [n, 32] -> [n, 8], BatchNorm and Dropout, saved in training mode.
const DEFAULT_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/serve_mlp.pt");

/// The longest budget a request may ask for (a day).
const MAX_BUDGET_MS: u64 = 86_400_000;

// ---- arguments -------------------------------------------------------------

#[derive(Debug)]
struct Args {
    addr: SocketAddr,
    model: PathBuf,
    workers: usize,
    queue: usize,
    plain: bool,
    body_limit: usize,
    default_deadline: Duration,
    intra_op_threads: i32,
    debug: bool,
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let mut args = Args {
        addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
        model: PathBuf::from(DEFAULT_MODEL),
        workers: cores,
        queue: 64,
        plain: false,
        body_limit: 1 << 20,
        default_deadline: Duration::from_secs(10),
        intra_op_threads: 1,
        debug: false,
    };
    fn value<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
        v.parse().map_err(|_| format!("{flag}: cannot read {v:?}"))
    }
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--addr" => args.addr = value(&flag, it.next())?,
            "--model" => args.model = value(&flag, it.next())?,
            "--workers" => args.workers = value(&flag, it.next())?,
            "--queue" => args.queue = value(&flag, it.next())?,
            "--plain" => args.plain = true,
            "--body-limit" => args.body_limit = value(&flag, it.next())?,
            "--deadline-ms" => {
                let ms: u64 = value(&flag, it.next())?;
                args.default_deadline = Duration::from_millis(ms.min(MAX_BUDGET_MS));
            }
            "--intra-op-threads" => args.intra_op_threads = value(&flag, it.next())?,
            "--debug" => args.debug = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.workers == 0 || args.queue == 0 || args.intra_op_threads < 1 {
        return Err("--workers, --queue and --intra-op-threads must be at least 1".into());
    }
    Ok(args)
}

// ---- errors ----------------------------------------------------------------

/// A response other than 200: its status and `{"error": message}`.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

/// A scope of the handler that cannot be entered (500), or its deadline,
/// which ended the request (504).
impl From<ScopeError> for ApiError {
    fn from(e: ScopeError) -> Self {
        let status = if e.is_ended() {
            StatusCode::GATEWAY_TIMEOUT
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        Self::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        #[derive(Serialize)]
        struct Body<'a> {
            error: &'a str,
        }
        json_response(
            self.status,
            &Body {
                error: &self.message,
            },
        )
    }
}

fn json_response(status: StatusCode, value: &impl Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            bytes,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

// ---- requests --------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest<'a> {
    shape: Vec<i64>,
    #[serde(borrow)]
    data: &'a RawValue,
}

/// A checked request: `data.len()` is the product of `shape`.
struct Input {
    shape: Vec<i64>,
    data: Vec<f32>,
}

#[derive(Serialize)]
struct Output {
    shape: Vec<i64>,
    data: Vec<f32>,
}

/// Reads the body (at most `limit` bytes) and checks it.
async fn read_input(body: Body, limit: usize) -> Result<Input, ApiError> {
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|e| {
        let over = std::error::Error::source(&e)
            .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
        if over {
            ApiError::bad_request(format!("request body over the limit of {limit} bytes"))
        } else {
            ApiError::bad_request(format!("cannot read the request body: {e}"))
        }
    })?;
    parse_input(&bytes)
}

fn parse_input(bytes: &[u8]) -> Result<Input, ApiError> {
    let raw: RawRequest<'_> = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("bad JSON: {e}")))?;
    let data = floats::parse_f32_array(raw.data.get()).map_err(ApiError::bad_request)?;
    let mut n: i64 = 1;
    for (i, &d) in raw.shape.iter().enumerate() {
        if d < 0 {
            return Err(ApiError::bad_request(format!(
                "shape[{i}] = {d} is negative"
            )));
        }
        n = n
            .checked_mul(d)
            .ok_or_else(|| ApiError::bad_request("the product of `shape` overflows"))?;
    }
    if usize::try_from(n).ok() != Some(data.len()) {
        return Err(ApiError::bad_request(format!(
            "`data` has {} values, `shape` {:?} needs {n}",
            data.len(),
            raw.shape
        )));
    }
    Ok(Input {
        shape: raw.shape,
        data,
    })
}

/// The request's budget from its arrival: `x-deadline-ms`, or the default.
fn budget(headers: &HeaderMap, default: Duration) -> Result<Duration, ApiError> {
    let Some(v) = headers.get("x-deadline-ms") else {
        return Ok(default);
    };
    v.to_str()
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        // At most a day: `arrival + budget` stays far from overflowing.
        .map(|ms| Duration::from_millis(ms.min(MAX_BUDGET_MS)))
        .ok_or_else(|| {
            ApiError::bad_request("x-deadline-ms must be a whole number of milliseconds")
        })
}

// ---- the worker pool -------------------------------------------------------

/// What the model runs in.
enum Engine {
    /// tch-scope: eval mode once, `inference_mode` around each call.
    Scoped(Inference<CModule>),
    /// Plain tch: `set_eval()` once, `no_grad` around each call.
    Plain(CModule),
}

/// How a job knows its deadline.
enum Ticket {
    /// The handler's scopes (inference mode, the deadline), entered here.
    Scoped(Context),
    /// The deadline as an instant, checked by hand between steps.
    Plain(Instant),
}

enum Job {
    Predict {
        ticket: Ticket,
        input: Input,
        reply: oneshot::Sender<Result<Output, ApiError>>,
    },
    /// Each worker takes exactly one (the barrier holds it until all have).
    Check {
        barrier: Arc<Barrier>,
        reply: std::sync::mpsc::Sender<Result<WorkerReport, String>>,
    },
    /// Holds the worker until the gate opens.
    Pause(Arc<Gate>),
}

#[derive(Default)]
struct Gate {
    state: Mutex<(usize, bool)>, // (workers held, open)
    cv: Condvar,
}

impl Gate {
    fn hold(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 += 1;
        self.cv.notify_all();
        while !s.1 {
            s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn wait_held(&self, n: usize, timeout: Duration) -> bool {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (s, _) = self
            .cv
            .wait_timeout_while(s, timeout, |s| s.0 < n)
            .unwrap_or_else(|p| p.into_inner());
        s.0 >= n
    }

    fn open(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.cv.notify_all();
    }
}

/// A worker thread's libtorch state, as `/debug/workers` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct ThreadState {
    grad_mode: bool,
    inference_mode: bool,
    /// The model's modes, one per module in `modules()` order.
    model_training: Vec<bool>,
    /// An operator runs (no deadline left open on the thread).
    ops_ok: bool,
}

#[derive(Debug, Serialize)]
struct WorkerReport {
    worker: usize,
    jobs: u64,
    at_start: ThreadState,
    now: ThreadState,
}

fn thread_state(engine: &Engine) -> Result<ThreadState, TchError> {
    let model_training = match engine {
        Engine::Scoped(served) => served.get_ref().modes()?.to_vec(),
        Engine::Plain(model) => model.modes()?.to_vec(),
    };
    let ops_ok = Tensor::f_zeros([2], (Kind::Float, Device::Cpu))
        .and_then(|t| t.f_add_scalar(1))
        .is_ok();
    Ok(ThreadState {
        grad_mode: is_grad_enabled(),
        inference_mode: is_inference_mode_enabled(),
        model_training,
        ops_ok,
    })
}

/// The model's input from the request, run, and its output read back.
fn forward(model: &CModule, input: &Input) -> Result<Output, TchError> {
    let x = Tensor::f_from_slice(&input.data)?.f_view(input.shape.as_slice())?;
    let y = model.forward_ts(&[x])?;
    let y = y.f_to_kind(Kind::Float)?;
    let shape = y.size();
    let data = Vec::<f32>::try_from(y.f_reshape([-1])?)?;
    Ok(Output { shape, data })
}

/// The model refused the input: the last line of libtorch's message
/// (a TorchScript error ends with the `RuntimeError: …` line).
fn refused(e: &TchError) -> ApiError {
    let text = e.to_string();
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    ApiError::bad_request(format!("the model refused the input: {line}"))
}

/// tch-scope: the request's context (inference mode, its deadline) around
/// the model run in its `Inference` handle. `Context::run` ends with the
/// deadline's `ScopeError` if it refused an operator.
fn predict_scoped(
    served: &Inference<CModule>,
    ctx: &Context,
    input: &Input,
) -> Result<Output, ApiError> {
    ctx.run(|| served.run(|m| forward(m, input)))?
        .map_err(|e| refused(&e))
}

/// Plain tch: `no_grad`, the deadline checked by hand between steps.
fn predict_plain(model: &CModule, deadline: Instant, input: &Input) -> Result<Output, ApiError> {
    let check = |step: &str| match Instant::now().checked_duration_since(deadline) {
        Some(late) => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            format!("deadline passed {late:?} ago {step}"),
        )),
        None => Ok(()),
    };
    tch::no_grad(|| {
        check("before the input")?;
        let x = Tensor::f_from_slice(&input.data)
            .and_then(|x| x.f_view(input.shape.as_slice()))
            .map_err(|e| refused(&e))?;
        check("before forward")?;
        let y = model.forward_ts(&[x]).map_err(|e| refused(&e))?;
        check("after forward")?;
        let y = y.f_to_kind(Kind::Float).map_err(|e| refused(&e))?;
        let shape = y.size();
        let data = y
            .f_reshape([-1])
            .and_then(Vec::<f32>::try_from)
            .map_err(|e| refused(&e))?;
        Ok(Output { shape, data })
    })
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_else(|| "a panic".into())
}

fn worker_loop(
    id: usize,
    jobs: Arc<Mutex<Receiver<Job>>>,
    engine: Arc<Engine>,
    depth: Arc<AtomicUsize>,
) {
    let at_start = thread_state(&engine);
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
                reply,
            } => {
                depth.fetch_sub(1, Ordering::Relaxed);
                let r = catch_unwind(AssertUnwindSafe(|| match (&*engine, &ticket) {
                    (Engine::Scoped(served), Ticket::Scoped(ctx)) => {
                        predict_scoped(served, ctx, &input)
                    }
                    (Engine::Plain(model), Ticket::Plain(deadline)) => {
                        predict_plain(model, *deadline, &input)
                    }
                    _ => Err(ApiError::internal("a job for the other server")),
                }));
                let r = r.unwrap_or_else(|p| {
                    Err(ApiError::internal(format!(
                        "the worker panicked: {}",
                        panic_message(&*p)
                    )))
                });
                done += 1;
                // The client may have gone: nobody to answer.
                let _ = reply.send(r);
            }
            Job::Check { barrier, reply } => {
                depth.fetch_sub(1, Ordering::Relaxed);
                barrier.wait();
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
                gate.hold();
            }
        }
    }
}

// ---- the HTTP side ---------------------------------------------------------

struct App {
    jobs: SyncSender<Job>,
    depth: Arc<AtomicUsize>,
    workers: usize,
    queue: usize,
    plain: bool,
    body_limit: usize,
    default_deadline: Duration,
    metrics: PrometheusHandle,
    paused: Mutex<Option<Arc<Gate>>>,
    requests: AtomicU64,
}

impl App {
    /// Queues a job without waiting: 503 when the queue is full.
    fn enqueue(&self, job: Job) -> Result<(), ApiError> {
        self.depth.fetch_add(1, Ordering::Relaxed);
        match self.jobs.try_send(job) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.depth.fetch_sub(1, Ordering::Relaxed);
                Err(match e {
                    TrySendError::Full(_) => ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("the queue is full ({} requests waiting)", self.queue),
                    ),
                    TrySendError::Disconnected(_) => ApiError::internal("the workers are gone"),
                })
            }
        }
    }

    /// Queues the input and waits for a worker's answer.
    async fn run(&self, ticket: Ticket, input: Input) -> Result<Output, ApiError> {
        let (reply, answer) = oneshot::channel();
        self.enqueue(Job::Predict {
            ticket,
            input,
            reply,
        })?;
        answer
            .await
            .map_err(|_| ApiError::internal("the worker dropped the request"))?
    }
}

/// The tch-scope handler: its scopes are entered around every poll; the
/// context it captures carries inference mode and the deadline (counted
/// from the arrival, so queued time counts) to the worker.
#[scope(
    inference_mode,
    timed("serve::predict"),
    deadline(until = arrival + budget)
)]
async fn predict(
    app: &App,
    arrival: Instant,
    budget: Duration,
    body: Body,
) -> Result<Output, ApiError> {
    let input = read_input(body, app.body_limit).await?;
    app.run(Ticket::Scoped(Context::capture()), input).await
}

/// The plain handler: the same, timed by hand.
async fn predict_plain_handler(
    app: &App,
    arrival: Instant,
    budget: Duration,
    body: Body,
) -> Result<Output, ApiError> {
    let start = Instant::now();
    let r = async {
        let input = read_input(body, app.body_limit).await?;
        app.run(Ticket::Plain(arrival + budget), input).await
    }
    .await;
    let outcome = if r.is_ok() { "ok" } else { "failed" };
    metrics::histogram!("serve_plain_predict_seconds", "outcome" => outcome)
        .record(start.elapsed().as_secs_f64());
    r
}

async fn predict_route(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let arrival = Instant::now();
    app.requests.fetch_add(1, Ordering::Relaxed);
    let r = match budget(&headers, app.default_deadline) {
        Err(e) => Err(e),
        Ok(b) if app.plain => predict_plain_handler(&app, arrival, b, body).await,
        Ok(b) => predict(&app, arrival, b, body).await,
    };
    let response = match r {
        Ok(out) => json_response(StatusCode::OK, &out),
        Err(e) => e.into_response(),
    };
    let status = response.status().as_str().to_string();
    metrics::counter!("http_requests_total", "path" => "/predict", "status" => status).increment(1);
    metrics::histogram!("http_request_duration_seconds", "path" => "/predict")
        .record(arrival.elapsed().as_secs_f64());
    metrics::gauge!("serve_queue_depth").set(app.depth.load(Ordering::Relaxed) as f64);
    response
}

async fn metrics_route(State(app): State<Arc<App>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        app.metrics.render(),
    )
        .into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Sends one job per worker, built by `job`, blocking while the queue is
/// full (debug routes only: they may wait for a slot).
async fn to_every_worker(
    app: &Arc<App>,
    job: impl Fn() -> Job + Send + 'static,
) -> Result<(), ApiError> {
    let app2 = Arc::clone(app);
    tokio::task::spawn_blocking(move || {
        for _ in 0..app2.workers {
            app2.depth.fetch_add(1, Ordering::Relaxed);
            if app2.jobs.send(job()).is_err() {
                return Err(ApiError::internal("the workers are gone"));
            }
        }
        Ok(())
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
}

async fn workers_route(State(app): State<Arc<App>>) -> Response {
    let barrier = Arc::new(Barrier::new(app.workers));
    let (tx, rx) = std::sync::mpsc::channel();
    let sent = to_every_worker(&app, move || Job::Check {
        barrier: Arc::clone(&barrier),
        reply: tx.clone(),
    })
    .await;
    if let Err(e) = sent {
        return e.into_response();
    }
    let n = app.workers;
    let reports = tokio::task::spawn_blocking(move || {
        (0..n)
            .map(|_| {
                rx.recv_timeout(Duration::from_secs(30))
                    .map_err(|e| format!("a worker did not answer: {e}"))?
            })
            .collect::<Result<Vec<_>, String>>()
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r);
    match reports {
        Ok(mut workers) => {
            workers.sort_by_key(|w| w.worker);
            #[derive(Serialize)]
            struct Body {
                server: &'static str,
                requests: u64,
                workers: Vec<WorkerReport>,
            }
            let server = if app.plain { "plain" } else { "tch-scope" };
            let requests = app.requests.load(Ordering::Relaxed);
            json_response(
                StatusCode::OK,
                &Body {
                    server,
                    requests,
                    workers,
                },
            )
        }
        Err(e) => ApiError::internal(e).into_response(),
    }
}

async fn pause_route(State(app): State<Arc<App>>) -> Response {
    let gate = Arc::new(Gate::default());
    {
        let mut paused = app.paused.lock().unwrap_or_else(|p| p.into_inner());
        if paused.is_some() {
            return ApiError::new(StatusCode::CONFLICT, "already paused").into_response();
        }
        *paused = Some(Arc::clone(&gate));
    }
    let g = Arc::clone(&gate);
    if let Err(e) = to_every_worker(&app, move || Job::Pause(Arc::clone(&g))).await {
        return e.into_response();
    }
    let n = app.workers;
    let held = tokio::task::spawn_blocking(move || gate.wait_held(n, Duration::from_secs(30)))
        .await
        .unwrap_or(false);
    if held {
        json_response(StatusCode::OK, &serde_json::json!({ "paused": n }))
    } else {
        ApiError::internal("the workers did not all stop").into_response()
    }
}

async fn resume_route(State(app): State<Arc<App>>) -> Response {
    match app.paused.lock().unwrap_or_else(|p| p.into_inner()).take() {
        Some(gate) => {
            gate.open();
            json_response(
                StatusCode::OK,
                &serde_json::json!({ "resumed": app.workers }),
            )
        }
        None => ApiError::new(StatusCode::CONFLICT, "not paused").into_response(),
    }
}

fn install_metrics() -> Result<PrometheusHandle, String> {
    let buckets = [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ];
    let handle = PrometheusBuilder::new()
        .set_buckets(&buckets)
        .and_then(|b| b.install_recorder())
        .map_err(|e| format!("cannot install the Prometheus recorder: {e}"))?;
    metrics::describe_counter!(
        "http_requests_total",
        "HTTP requests answered, by path and status."
    );
    metrics::describe_histogram!(
        "http_request_duration_seconds",
        metrics::Unit::Seconds,
        "Time from a request's arrival to its response."
    );
    metrics::describe_gauge!("serve_queue_depth", "Jobs waiting for a model worker.");
    metrics::describe_histogram!(
        "serve_plain_predict_seconds",
        metrics::Unit::Seconds,
        "The plain server's predict handler, timed by hand."
    );
    tch_scope::report::describe_metrics();
    Ok(handle)
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

fn main() {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("serve: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args) {
        eprintln!("serve: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    // One intra-op thread per worker: the workers are the parallelism
    // (worker threads copy this process value at their first parallel op).
    tch::set_num_threads(args.intra_op_threads);
    let model = CModule::load(&args.model)
        .map_err(|e| format!("cannot load {}: {e}", args.model.display()))?;
    let engine = if args.plain {
        let mut model = model;
        model.set_eval();
        Engine::Plain(model)
    } else {
        Engine::Scoped(Inference::new(model).map_err(|e| e.to_string())?)
    };
    let engine = Arc::new(engine);
    let metrics = install_metrics()?;

    let (tx, rx) = sync_channel::<Job>(args.queue);
    let rx = Arc::new(Mutex::new(rx));
    let depth = Arc::new(AtomicUsize::new(0));
    let workers: Vec<JoinHandle<()>> = (0..args.workers)
        .map(|i| {
            let (rx, engine, depth) = (Arc::clone(&rx), Arc::clone(&engine), Arc::clone(&depth));
            std::thread::Builder::new()
                .name(format!("model-worker-{i}"))
                .spawn(move || worker_loop(i, rx, engine, depth))
                .map_err(|e| format!("cannot start a worker: {e}"))
        })
        .collect::<Result<_, _>>()?;

    let app = Arc::new(App {
        jobs: tx,
        depth,
        workers: args.workers,
        queue: args.queue,
        plain: args.plain,
        body_limit: args.body_limit,
        default_deadline: args.default_deadline,
        metrics,
        paused: Mutex::new(None),
        requests: AtomicU64::new(0),
    });
    let mut router = Router::new()
        .route("/predict", post(predict_route))
        .route("/metrics", get(metrics_route))
        .route("/healthz", get(healthz));
    if args.debug {
        router = router
            .route("/debug/workers", get(workers_route))
            .route("/debug/pause", post(pause_route))
            .route("/debug/resume", post(resume_route));
    }
    // The body limit is ours (400 with a message), not axum's 413.
    let router = router
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(Arc::clone(&app));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("serve-io")
        .build()
        .map_err(|e| format!("cannot start tokio: {e}"))?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.addr)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.addr))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let upkeep = app.metrics.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                upkeep.run_upkeep();
            }
        });
        let kind = if args.plain { "plain tch" } else { "tch-scope" };
        println!(
            "listening on http://{local} ({kind}, {} workers, queue {}, model {})",
            args.workers,
            args.queue,
            args.model.display()
        );
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown_signal())
            .await
            .map_err(|e| format!("server error: {e}"))
    })?;
    drop(rt);

    // Every handler is gone: closing the queue ends the workers.
    if let Some(gate) = app.paused.lock().unwrap_or_else(|p| p.into_inner()).take() {
        gate.open();
    }
    drop(app);
    drop(rx);
    for w in workers {
        let _ = w.join();
    }
    if let Ok(Engine::Scoped(served)) = Arc::try_unwrap(engine) {
        // The model back in the modes it was loaded with.
        let model = served.into_inner();
        let training = model.modes().map(|m| m.iter().filter(|t| **t).count());
        println!("stopped; the model is back in its saved modes ({training:?} modules training)");
    }
    Ok(())
}
