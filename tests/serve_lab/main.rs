//! An HTTP inference server: hyper's HTTP/1 connections (an axum router)
//! on a multi-thread tokio runtime, a model (one float tensor in, one out)
//! run by worker threads: a batcher's, or a pool fed by a bounded queue
//! (docs/serving.md). The model is a TorchScript file (`tch::CModule`), or
//! an AOTInductor package when its path ends in `.pt2`
//! ([`tch_scope::aoti::Package`]).
//!
//! ```text
//! cargo run --release -p examples --example serve -- --addr 127.0.0.1:8080 \
//!     [--model PATH] [--workers N] [--queue N] [--max-batch N] [--max-delay-ms MS] \
//!     [--plain] [--debug]
//! ```
//!
//! `--help` lists every flag with its default and its range (clap); a bad
//! flag or value is a usage error (exit status 2).
//!
//! - `POST /predict` `{"shape": [n, …], "data": [f32, …]}` (row-major,
//!   `content-type: application/json`) → `{"shape": […], "data": […]}`.
//!   The header `x-deadline-ms` gives the request's budget from its
//!   arrival (default `--deadline-ms`). docs/serving.md has the status
//!   table; every answer carries an `x-request-id`.
//! - `GET /metrics` (Prometheus text), `GET /healthz` (stuck or gone
//!   workers: 503, with the reason), `GET /readyz` (200 once every worker
//!   has run the model once, 503 once one has ended). When the last worker
//!   ends, `/predict` answers 503 at once, queued requests too.
//! - With `--debug`: `GET /debug/workers` (each worker's grad mode,
//!   inference mode and the model's modes, at its start and now),
//!   `POST /debug/pause` and `POST /debug/resume` (hold every worker, so
//!   that tests can fill the queue), the request header
//!   `x-debug-fault` (`panic:MESSAGE`, `sleep:MS`, `die`) for the tests of
//!   what a failing worker does, and `x-debug-grad: on` (the request's
//!   context captured with grad mode on, inference mode off: another scope
//!   state). The batched server's 200 answers then say what the forward
//!   ran in ([`Ran`]: `x-debug-batch`, `x-debug-grad-mode`,
//!   `x-debug-inference-mode`), for the tests of mixed scope states.
//!
//! Connections: at most `--max-connections` at once (the rest wait in the
//! kernel's backlog), a request head must arrive within
//! `--header-timeout-s` of its first byte, a connection with no request
//! for `--idle-timeout-s` is closed, a body must arrive within
//! `--body-timeout-s`, and a connection whose answer makes no write
//! progress for `--write-timeout-s` (a client that does not read it) is
//! closed. SIGTERM or SIGINT stops accepting, finishes the
//! requests in flight and exits within `--shutdown-timeout-s`; a second
//! signal exits at once.
//!
//! The tch-scope server: the handler is an attributed `async fn`
//! (`inference_mode`, `timed`, `deadline(until = arrival + budget)`); it
//! captures its [`Context`] and queues it with the input; a worker enters
//! it and runs the model in an [`Inference`] handle. By default the queue
//! is a [`Batcher`] (`--max-batch`, default 32; `--max-delay-ms`, default
//! 2): requests of equal scope state are computed together, each by its
//! deadline (an expired one answered 504 uncomputed), a request whose
//! client went is dropped uncomputed, and one bad request fails alone
//! ([`Batched`]). `--max-batch 1` keeps the worker pool (one request a
//! forward). `--plain` never batches; it serves the same with plain tch: `tch::no_grad`, the model put in eval once, the
//! time taken by hand, the deadline checked by hand between steps.
//!
//! A `.pt2` package: tch has no loader for one (tch-rs #979), so `--plain`
//! loads it with `tch_scope::aoti::Package` too and calls `Package::run`
//! under `tch::no_grad`, with none of the scopes (no `Inference`, no
//! `Context`): the deadline checked by hand as for TorchScript. A package
//! has no train/eval modes (`/debug/workers` shows `model_training: []`),
//! and a deadline that passes while a package runs does not stop it (it
//! is refused at the run's entry, and after it: docs/words.md).

#[path = "../../examples/common/floats.rs"]
mod floats;

mod batched;
mod controls;
mod oip;

use batched::{BatchEngine, Batched, close_batcher};
use controls::{Control, ControlTicket, Controls, Ran, Registered, WORKER_NAME, batched_forward};
use tch_scope::serve::connections::{Limits, serve_connection};

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Parser;
use clap::builder::{RangedU64ValueParser, TypedValueParser};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tch::{CModule, Device, Kind, TchError, Tensor};
use tch_scope::aoti::Package;
use tch_scope::batch::{self, BatchError, BatchOptions, Batcher, Ticket as BatchTicket};
use tch_scope::{
    Context, Inference, ScopeError, Servable, Trainable, is_grad_enabled,
    is_inference_mode_enabled, scope,
};
use tokio::sync::{Semaphore, oneshot, watch};

/// The model `scripts/export_models.py` exports with the bootstrap's
/// PyTorch: [n, 32] -> [n, 8], BatchNorm and Dropout, saved in training mode.
const DEFAULT_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/serve_mlp.pt");

/// The longest budget a request may ask for (a day).
const MAX_BUDGET_MS: u64 = 86_400_000;

/// How long a debug route waits for the queue or the workers.
const DEBUG_WAIT: Duration = Duration::from_secs(10);

// ---- arguments -------------------------------------------------------------

/// An HTTP inference server for one model (TorchScript, or an AOTInductor
/// `.pt2` package), served with tch-scope's scopes, or with plain tch under
/// `--plain`. Routes: POST /predict, GET /metrics, /healthz, /readyz (and
/// /debug/* with `--debug`); docs/serving.md has the details.
#[derive(Debug, Parser)]
// As the hand-written parser before it: a flag given again overrides, and
// `--deadline-ms -1` is a bad value, not an unknown flag.
#[command(
    name = "serve",
    args_override_self = true,
    allow_negative_numbers = true
)]
struct Args {
    /// The address to listen on (port 0: any free port; the first line on
    /// stdout names the one bound).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// The model: a TorchScript file, or an AOTInductor package when the
    /// path ends in `.pt2` [default: the repository's
    /// tests/data/serve_mlp.pt, [n, 32] -> [n, 8]].
    #[arg(long, value_name = "PATH", default_value = DEFAULT_MODEL, hide_default_value = true)]
    model: PathBuf,
    /// Worker threads that run the model [default: one per core].
    #[arg(
        long,
        value_name = "N",
        default_value_t = cores(),
        hide_default_value = true,
        value_parser = at_least_one::<usize>
    )]
    workers: usize,
    /// The most requests waiting for a worker; one more is answered 503.
    #[arg(
        long,
        value_name = "N",
        default_value = "64",
        value_parser = at_least_one::<usize>
    )]
    queue: usize,
    /// Serve with plain tch (`no_grad`, eval set once, the deadline checked
    /// by hand) instead of tch-scope's scopes; never batches.
    #[arg(long)]
    plain: bool,
    /// The largest request body, in bytes (a larger one: 400).
    #[arg(long, value_name = "BYTES", default_value = "1048576")]
    body_limit: usize,
    /// A request's budget from its arrival when it sends no `x-deadline-ms`
    /// header (more than a day counts as a day).
    #[arg(
        long = "deadline-ms",
        value_name = "MS",
        default_value = "10000",
        value_parser = clap::value_parser!(u64)
            .map(|ms| Duration::from_millis(ms.min(MAX_BUDGET_MS)))
    )]
    default_deadline: Duration,
    /// libtorch's intra-op threads for each worker.
    #[arg(
        long,
        value_name = "N",
        default_value = "1",
        value_parser = at_least_one::<i32>
    )]
    intra_op_threads: i32,
    /// Add the /debug routes (`/debug/workers`, `/debug/pause`,
    /// `/debug/resume`), the `x-debug-fault` and `x-debug-grad` request
    /// headers and the batched server's `x-debug-batch` answer headers, for
    /// tests.
    #[arg(long)]
    debug: bool,
    /// Seconds from a request head's first byte to its last (fractions
    /// allowed; more than 0, at most 86400).
    #[arg(long = "header-timeout-s", value_name = "S", default_value = "10", value_parser = seconds)]
    header_timeout: Duration,
    /// Seconds a connection may wait with no request before it is closed
    /// (fractions allowed; more than 0, at most 86400).
    #[arg(long = "idle-timeout-s", value_name = "S", default_value = "30", value_parser = seconds)]
    idle_timeout: Duration,
    /// Seconds a request body may take to arrive (fractions allowed; more
    /// than 0, at most 86400).
    #[arg(long = "body-timeout-s", value_name = "S", default_value = "30", value_parser = seconds)]
    body_timeout: Duration,
    /// Seconds an answer's write may make no progress (the client reads
    /// none of it) before its connection is closed (fractions allowed; more
    /// than 0, at most 86400).
    #[arg(long = "write-timeout-s", value_name = "S", default_value = "30", value_parser = seconds)]
    write_timeout: Duration,
    /// Connections served at once, 1 to 1048576; the rest wait in the
    /// kernel's backlog.
    // Shutdown takes back every permit in one `acquire_many(u32)`; a
    // million is past any open-file limit worth serving up to.
    #[arg(
        long,
        value_name = "N",
        default_value = "1024",
        value_parser = clap::value_parser!(u32).range(1..=1 << 20)
    )]
    max_connections: u32,
    /// Seconds that SIGTERM or SIGINT gives the requests in flight before
    /// the server exits (fractions allowed; more than 0, at most 86400).
    #[arg(long = "shutdown-timeout-s", value_name = "S", default_value = "10", value_parser = seconds)]
    shutdown_timeout: Duration,
    /// Seconds a worker may spend starting or on one job before /healthz
    /// calls it stuck and answers 503 (fractions allowed; more than 0, at
    /// most 86400).
    #[arg(long = "stuck-after-s", value_name = "S", default_value = "60", value_parser = seconds)]
    stuck_after: Duration,
    /// The input each worker runs once at its start (zeros) before
    /// /readyz says ready: comma-separated dims (each 0 to 2^20, at most
    /// 2^24 values), or `none` for no warm-up.
    // Fully qualified: clap reads a plain `Option<Vec<_>>` as a flag
    // given any number of times.
    #[arg(long, value_name = "DIMS|none", default_value = "1,32", value_parser = shape)]
    warmup_shape: ::std::option::Option<::std::vec::Vec<i64>>,
    /// The tch-scope server's most requests a forward, 1 to 4096 (1: no
    /// batching, the worker pool as without a batcher). `--plain` never
    /// batches.
    #[arg(
        long,
        value_name = "N",
        default_value = "32",
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=4096)
    )]
    max_batch: usize,
    /// How long a batch may wait for more requests when the workers are
    /// loaded, in milliseconds, at most 10000 (see `tch_scope::batch`).
    #[arg(
        long = "max-delay-ms",
        value_name = "MS",
        default_value = "2",
        value_parser = clap::value_parser!(u64).range(..=10_000).map(Duration::from_millis)
    )]
    max_delay: Duration,
    /// The model's name in the Open Inference Protocol's routes
    /// (`/v2/models/NAME`) [default: the model file's stem]. The `/v2`
    /// routes come with the batched tch-scope server (not with
    /// `--max-batch 1` or `--plain`), for a `.pt2` or with `--input-shape`.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// The model's input for the `/v2` routes' metadata and checks:
    /// comma-separated dims, `-1` for the batch (e.g. `-1,32`); a
    /// TorchScript file declares none (a `.pt2` declares its own).
    #[arg(long, value_name = "DIMS", value_parser = oip::input_shape, allow_hyphen_values = true)]
    input_shape: Option<oip::InputShape>,
    /// The input's datatype for the `/v2` routes (`FP32`, `FP64`, `INT64`,
    /// …).
    #[arg(long, value_name = "DATATYPE", default_value = "FP32", value_parser = oip::input_dtype)]
    input_dtype: tch_scope::serve::oip::Datatype,
}

impl Args {
    /// The connections' clocks.
    fn limits(&self) -> Limits {
        Limits {
            header: self.header_timeout,
            idle: self.idle_timeout,
            write: self.write_timeout,
        }
    }
}

/// The default `--workers`: one per core.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// `--workers`, `--queue`, `--intra-op-threads`: a count, at least 1.
fn at_least_one<T>(v: &str) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + From<u8>,
    T::Err: std::fmt::Display,
{
    let n: T = v.parse().map_err(|e: T::Err| e.to_string())?;
    if n >= T::from(1) {
        Ok(n)
    } else {
        Err("must be at least 1".into())
    }
}

/// Seconds, fractions allowed: more than 0, at most a day.
fn seconds(v: &str) -> Result<Duration, String> {
    let s: f64 = v
        .parse()
        .map_err(|_| "not a number of seconds".to_string())?;
    if s > 0.0 && s <= 86_400.0 {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err("must be more than 0 and at most 86400 seconds".into())
    }
}

/// `--warmup-shape`: `none`, or comma-separated dims, each 0 to 2^20, at
/// most 2^24 values in all.
fn shape(v: &str) -> Result<Option<Vec<i64>>, String> {
    if v == "none" {
        return Ok(None);
    }
    let dims = v
        .split(',')
        .map(|d| {
            d.trim()
                .parse::<i64>()
                .ok()
                .filter(|d| (0..=1 << 20).contains(d))
        })
        .collect::<Option<Vec<_>>>()
        .ok_or("expected comma-separated dims, each 0 to 1048576 (e.g. 1,32), or none")?;
    let n = dims.iter().try_fold(1i64, |n, &d| n.checked_mul(d));
    if n.is_none_or(|n| n > 1 << 24) {
        return Err("more than 2^24 values".into());
    }
    Ok(Some(dims))
}

// ---- errors ----------------------------------------------------------------

/// A response other than 200: its status and `{"error": message}`.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    message: String,
    /// For the server's log only (a panic's message): the client gets the
    /// request id instead, since a panic message may say anything.
    detail: Option<String>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            detail: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// 500; the message goes to the log with the request id, not to the
    /// client.
    fn panicked(what: &str, message: String) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!(
                "internal error: {what} panicked (the server's log has it under this request id)"
            ),
            detail: Some(format!("{what} panicked: {message}")),
        }
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
        error_response(&self, None)
    }
}

/// 503: no worker is left to run the model (every one ended).
fn no_worker() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "no model worker is running (every worker ended; /healthz says so)",
    )
}

/// 503: `limit` (`--queue`) requests already wait for a worker.
fn queue_full(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("the queue is full ({limit} requests waiting)"),
    )
}

/// 503 for a debug route whose job found no room in the queue in time.
fn queue_stayed_full() -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the queue stayed full")
}

/// `{"error": …}`, with `"request_id"` where the route gives requests one.
fn error_response(e: &ApiError, request_id: Option<&str>) -> Response {
    #[derive(Serialize)]
    struct Body<'a> {
        error: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        request_id: Option<&'a str>,
    }
    json_response(
        e.status,
        &Body {
            error: &e.message,
            request_id,
        },
    )
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

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_else(|| "a panic".into())
}

/// A future whose panic becomes an `Err`, so that a handler's panic is
/// answered (500 with the request id) rather than dropping the
/// connection without a word.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let f = self.0.as_mut();
        match catch_unwind(AssertUnwindSafe(|| f.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(p) => Poll::Ready(Err(panic_message(&*p))),
        }
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
    /// The batched server with `--debug`: what the forward ran in (the
    /// `x-debug-batch`, `x-debug-grad-mode` and `x-debug-inference-mode`
    /// answer headers, not the body).
    #[serde(skip)]
    ran: Option<Ran>,
}

/// `application/json` or `application/…+json`, parameters allowed.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(v) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = v
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Reads the body (at most `limit` bytes, within `timeout`) and checks it.
async fn read_input(body: Body, limit: usize, timeout: Duration) -> Result<Input, ApiError> {
    let read = tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await;
    let bytes = read
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s",
                    timeout.as_secs_f64()
                ),
            )
        })?
        .map_err(|e| {
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

/// What `x-debug-fault` makes the worker do with a job (`--debug` only).
#[derive(Debug, Clone)]
enum Fault {
    /// Panics inside the job (caught: the worker goes on).
    Panic(String),
    /// Sleeps before the model runs (a worker busy that long).
    Sleep(Duration),
    /// Panics outside the job's catch: the worker thread ends.
    Die,
}

fn debug_fault(headers: &HeaderMap) -> Result<Option<Fault>, ApiError> {
    let Some(v) = headers.get("x-debug-fault") else {
        return Ok(None);
    };
    let v = v.to_str().unwrap_or("");
    let fault = if let Some(m) = v.strip_prefix("panic:") {
        Some(Fault::Panic(m.to_string()))
    } else if let Some(ms) = v.strip_prefix("sleep:") {
        ms.trim()
            .parse::<u64>()
            .ok()
            .map(|ms| Fault::Sleep(Duration::from_millis(ms.min(MAX_BUDGET_MS))))
    } else if v == "die" {
        Some(Fault::Die)
    } else {
        None
    };
    fault.map(Some).ok_or_else(|| {
        ApiError::bad_request("x-debug-fault must be panic:MESSAGE, sleep:MS or die")
    })
}

/// `x-debug-grad` (`--debug` only): `on` captures the request's context
/// with grad mode on and inference mode off (`inference_mode(false),
/// enable_grad`) instead of the handler's `inference_mode`, so that it is
/// never batched with the default requests (the batched server also makes
/// its input require grad: a request that asks for a graph, computed with
/// grad mode, alone); `off` (or no header) is the default.
fn debug_grad(headers: &HeaderMap) -> Result<bool, ApiError> {
    match headers.get("x-debug-grad").map(HeaderValue::to_str) {
        None => Ok(false),
        Some(Ok("on")) => Ok(true),
        Some(Ok("off")) => Ok(false),
        Some(_) => Err(ApiError::bad_request("x-debug-grad must be on or off")),
    }
}

// ---- the worker pool -------------------------------------------------------

/// What the model runs in.
enum Engine {
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
    fn plain(&self) -> bool {
        matches!(self, Engine::Plain(_) | Engine::PlainPackage(_))
    }
}

/// A model the workers run: one float tensor in, one out.
trait Model {
    /// Runs the model on `x`; an input it refuses is a 422 (see
    /// [`refused`]), a passed deadline a 504.
    fn forward_one(&self, x: Tensor) -> Result<Tensor, ApiError>;
    /// Each module's training flag (none for a package).
    fn training(&self) -> Result<Vec<bool>, TchError>;
    /// The batched server's forward: every output; an error of the model
    /// itself (a 422, see [`refused`]) under the scope name [`MODEL`].
    fn forward_batch(&self, xs: &[Tensor]) -> Result<Vec<Tensor>, ScopeError>;
}

/// The scope name of the model's own errors in the batched server.
const MODEL: &str = "serve::model";

impl Model for CModule {
    fn forward_one(&self, x: Tensor) -> Result<Tensor, ApiError> {
        self.forward_ts(&[x]).map_err(|e| refused(&e.to_string()))
    }

    fn forward_batch(&self, xs: &[Tensor]) -> Result<Vec<Tensor>, ScopeError> {
        batch::cmodule_forward(self, xs).map_err(|e| ScopeError::new(MODEL, None, e.reason()))
    }

    fn training(&self) -> Result<Vec<bool>, TchError> {
        Ok(self.modes()?.to_vec())
    }
}

impl Model for Package {
    fn forward_one(&self, x: Tensor) -> Result<Tensor, ApiError> {
        match self.run(&[&x]) {
            Ok(mut ys) if ys.len() == 1 => Ok(ys.remove(0)),
            Ok(ys) => Err(ApiError::internal(format!(
                "the package returned {} tensors, not one",
                ys.len()
            ))),
            // Refused at the run's entry: the deadline's 504.
            Err(e) if e.is_ended() => Err(e.into()),
            Err(e) => Err(refused(&e.to_string())),
        }
    }

    fn training(&self) -> Result<Vec<bool>, TchError> {
        Ok(Vec::new())
    }

    fn forward_batch(&self, xs: &[Tensor]) -> Result<Vec<Tensor>, ScopeError> {
        // Refused at the run's entry by the deadline: its own error (504).
        batch::package_forward(self, xs).map_err(|e| {
            if e.is_ended() {
                e
            } else {
                ScopeError::new(MODEL, None, e.to_string())
            }
        })
    }
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

/// Where `n` workers meet, each waiting a bounded time: a worker that
/// never comes (busy, or gone) costs the others a timeout, not a hang.
struct Meeting {
    n: usize,
    /// (workers arrived, cancelled)
    state: Mutex<(usize, bool)>,
    cv: Condvar,
}

impl Meeting {
    fn new(n: usize) -> Self {
        Self {
            n,
            state: Mutex::new((0, false)),
            cv: Condvar::new(),
        }
    }

    /// Whether all `n` came within `timeout` (and nobody cancelled).
    fn arrive(&self, timeout: Duration) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 += 1;
        self.cv.notify_all();
        let (s, _) = self
            .cv
            .wait_timeout_while(s, timeout, |s| s.0 < self.n && !s.1)
            .unwrap_or_else(|p| p.into_inner());
        s.0 >= self.n && !s.1
    }

    /// The route that called the meeting is gone: nobody waits longer.
    fn cancel(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.cv.notify_all();
    }
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
        while !s.1 {
            s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn held(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    fn open(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.cv.notify_all();
    }
}

/// A worker's state as `/healthz` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Phase {
    /// Loading: its warm-up forward.
    Starting = 0,
    Idle = 1,
    Busy = 2,
    /// Held by `/debug/pause`.
    Paused = 3,
    /// The thread ended.
    Gone = 4,
}

impl Phase {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Starting,
            1 => Self::Idle,
            2 => Self::Busy,
            3 => Self::Paused,
            _ => Self::Gone,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Idle => "idle",
            Self::Busy => "busy",
            Self::Paused => "paused",
            Self::Gone => "gone",
        }
    }
}

/// One worker's phase, since when, and whether it has run the model.
struct Slot {
    phase: AtomicU8,
    since_ms: AtomicU64,
    warmed: AtomicBool,
}

/// Every worker's [`Slot`], written by the workers (two relaxed stores a
/// job), read by `/healthz` and `/readyz`.
struct Workers {
    epoch: Instant,
    slots: Vec<Slot>,
    /// Counts the workers gone: handlers waiting for a worker watch it, to
    /// answer at once when none is left.
    gone: watch::Sender<usize>,
}

impl Workers {
    fn new(n: usize) -> Self {
        Self {
            epoch: Instant::now(),
            slots: (0..n)
                .map(|_| Slot {
                    phase: AtomicU8::new(Phase::Starting as u8),
                    since_ms: AtomicU64::new(0),
                    warmed: AtomicBool::new(false),
                })
                .collect(),
            gone: watch::Sender::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Sets a worker's phase; `Gone` is for good (a worker marked gone
    /// by its request's handler stays so whatever its thread does next).
    fn set(&self, worker: usize, phase: Phase) {
        let s = &self.slots[worker];
        s.since_ms.store(self.now_ms(), Ordering::Relaxed);
        let gone = Phase::Gone as u8;
        let was = s
            .phase
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |p| {
                (p != gone).then_some(phase as u8)
            });
        if phase == Phase::Gone && was.is_ok() {
            self.gone.send_modify(|n| *n += 1);
        }
    }

    /// Changes each time a worker is marked gone.
    fn subscribe(&self) -> watch::Receiver<usize> {
        self.gone.subscribe()
    }

    fn phase(&self, worker: usize) -> (Phase, Duration) {
        let s = &self.slots[worker];
        let phase = Phase::from_u8(s.phase.load(Ordering::Relaxed));
        let since = s.since_ms.load(Ordering::Relaxed);
        (
            phase,
            Duration::from_millis(self.now_ms().saturating_sub(since)),
        )
    }

    fn live(&self) -> usize {
        (0..self.slots.len())
            .filter(|&i| self.phase(i).0 != Phase::Gone)
            .count()
    }
}

/// A job's place under `--queue` in the pool's queue ([`App::reserve`]).
struct Place<'a>(&'a AtomicUsize);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
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
        Engine::Scoped(served) => served.get_ref().training()?,
        Engine::Plain(model) => model.training()?,
        Engine::ScopedPackage(served) => served.get_ref().training()?,
        Engine::PlainPackage(model) => model.training()?,
    };
    state_with(model_training)
}

/// This thread's state, with the model's modes given.
fn state_with(model_training: Vec<bool>) -> Result<ThreadState, TchError> {
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

/// The input as a tensor: `parse_input` checked the shape, so a failure
/// here is the server's (500).
fn input_tensor(input: &Input) -> Result<Tensor, ApiError> {
    Tensor::f_from_slice(&input.data)
        .and_then(|x| x.f_view(input.shape.as_slice()))
        .map_err(|e| ApiError::internal(format!("cannot build the input tensor: {e}")))
}

/// The model's output read back. A non-finite value is the server's
/// failure (500): JSON has no NaN or infinity, and a `null` in a 200
/// would look like an answer.
fn read_output(y: &Tensor) -> Result<Output, ApiError> {
    let fail = |e: TchError| ApiError::internal(format!("cannot read the model's output: {e}"));
    let y = y.f_to_kind(Kind::Float).map_err(fail)?;
    let shape = y.size();
    let data = y
        .f_reshape([-1])
        .and_then(Vec::<f32>::try_from)
        .map_err(fail)?;
    if let Some(i) = data.iter().position(|v| !v.is_finite()) {
        return Err(ApiError::internal(format!(
            "the model's output is not finite (data[{i}] = {})",
            data[i]
        )));
    }
    Ok(Output {
        shape,
        data,
        ran: None,
    })
}

/// The model refused the input (422): the last line of libtorch's message
/// (a TorchScript error ends with the `RuntimeError: …` line; a package's
/// says which input and what it expected). Running out of memory is the
/// server's failure (500).
fn refused(text: &str) -> ApiError {
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let lower = text.to_ascii_lowercase();
    if lower.contains("out of memory") || lower.contains("can't allocate memory") {
        return ApiError::internal(format!("the model ran out of memory: {line}"));
    }
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!("the model refused the input: {line}"),
    )
}

/// The model's input from the request, run, and its output read back.
fn forward(model: &impl Model, input: &Input) -> Result<Output, ApiError> {
    let x = input_tensor(input)?;
    let y = model.forward_one(x)?;
    read_output(&y)
}

/// tch-scope: the request's context (inference mode, its deadline) around
/// the model run in its `Inference` handle. `Context::run` ends with the
/// deadline's `ScopeError` if it refused an operator.
fn predict_scoped<M: Model + tch_scope::Servable>(
    served: &Inference<M>,
    ctx: &Context,
    input: &Input,
) -> Result<Output, ApiError> {
    ctx.run(|| served.run(|m| forward(m, input)))?
}

/// Plain tch: `no_grad`, the deadline checked by hand between steps.
fn predict_plain(model: &impl Model, deadline: Instant, input: &Input) -> Result<Output, ApiError> {
    let check = |step: &str| match Instant::now().checked_duration_since(deadline) {
        Some(late) => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            format!("deadline passed {late:?} ago {step}"),
        )),
        None => Ok(()),
    };
    tch::no_grad(|| {
        check("before the input")?;
        let x = input_tensor(input)?;
        check("before forward")?;
        let y = model.forward_one(x)?;
        check("after forward")?;
        read_output(&y)
    })
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

// ---- the batched server: examples/serve/batched.rs, controls.rs ----------

// ---- the HTTP side ---------------------------------------------------------

struct App {
    /// The batched server's model side (`--max-batch` above 1); `None`:
    /// the worker pool behind `jobs`.
    batched: Option<Batched>,
    jobs: SyncSender<Job>,
    depth: Arc<AtomicUsize>,
    workers: Arc<Workers>,
    queue: usize,
    plain: bool,
    debug: bool,
    body_limit: usize,
    body_timeout: Duration,
    default_deadline: Duration,
    stuck_after: Duration,
    metrics: PrometheusHandle,
    paused: Mutex<Option<Arc<Gate>>>,
    /// One debug route at a time: two checks sharing the workers would
    /// each hold some of them at its meeting.
    debug_turn: tokio::sync::Mutex<()>,
    stopping: AtomicBool,
    requests: AtomicU64,
    connections: Arc<Semaphore>,
    max_connections: u32,
}

impl App {
    fn worker_count(&self) -> usize {
        self.workers.slots.len()
    }

    /// A process-unique id: the pid, then a counter.
    fn request_id(&self) -> String {
        let n = self.requests.fetch_add(1, Ordering::Relaxed);
        format!("{:x}-{n}", std::process::id())
    }

    /// A place in the pool's queue: `depth` counted up only while under
    /// `--queue` (one compare-and-swap: never past it, even for a moment),
    /// given back if the job is not sent.
    fn reserve(&self) -> Option<Place<'_>> {
        self.depth
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                (d < self.queue).then_some(d + 1)
            })
            .ok()
            .map(|_| Place(&self.depth))
    }

    /// Sends `job` in a place of its own: `Err(job)` when the queue is full.
    fn try_enqueue(&self, job: Job) -> Result<Result<(), Job>, ApiError> {
        let Some(place) = self.reserve() else {
            return Ok(Err(job));
        };
        match self.jobs.try_send(job) {
            Ok(()) => {
                // The worker that takes the job gives the place back.
                std::mem::forget(place);
                Ok(Ok(()))
            }
            // Not while `depth` counts every job sent and not yet taken;
            // the place is given back either way.
            Err(TrySendError::Full(job)) => Ok(Err(job)),
            Err(TrySendError::Disconnected(_)) => Err(no_worker()),
        }
    }

    /// Queues a job without waiting: 503 when the queue is full.
    fn enqueue(&self, job: Job) -> Result<(), ApiError> {
        self.try_enqueue(job)?.map_err(|_| queue_full(self.queue))
    }

    /// Queues a job, waiting for a place until `until` (debug routes).
    async fn enqueue_by(&self, mut job: Job, until: Instant) -> Result<(), ApiError> {
        loop {
            match self.try_enqueue(job)? {
                Ok(()) => return Ok(()),
                Err(_) if Instant::now() >= until => return Err(queue_stayed_full()),
                Err(back) => job = back,
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Sends a debug job to the workers: on the pool's queue, or as a
    /// control request to the batcher (its ticket, to keep until taken).
    async fn send_control(
        &self,
        job: Job,
        until: Instant,
    ) -> Result<Option<ControlTicket>, ApiError> {
        let Some(b) = &self.batched else {
            return self.enqueue_by(job, until).await.map(|()| None);
        };
        let op = match job {
            Job::Check { meeting, reply } => Control::Check { meeting, reply },
            Job::Pause(gate) => Control::Pause(gate),
            Job::Predict { .. } => return Err(ApiError::internal("a request is not a control")),
        };
        b.control(op, until).await.map(Some)
    }

    /// Model workers running: the batcher's threads less those the server
    /// knows are gone, or the pool's threads.
    fn live(&self) -> usize {
        match &self.batched {
            Some(b) => b.live(),
            None => self.workers.live(),
        }
    }

    /// Requests waiting for a worker.
    fn queue_depth(&self) -> usize {
        match &self.batched {
            Some(b) => b.engine.queued(),
            None => self.depth.load(Ordering::Relaxed),
        }
    }

    /// Queues the input and waits for a worker's answer.
    async fn run(
        &self,
        ticket: Ticket,
        input: Input,
        fault: Option<Fault>,
    ) -> Result<Output, ApiError> {
        if self.workers.live() == 0 {
            return Err(no_worker());
        }
        let (reply, answer) = oneshot::channel();
        self.enqueue(Job::Predict {
            ticket,
            input,
            fault,
            reply,
        })?;
        // A job is dropped unanswered when its worker ended running it, or
        // when the last worker ended with it queued.
        answer.await.map_err(|_| {
            if self.workers.live() == 0 {
                no_worker()
            } else {
                ApiError::internal("the worker dropped the request")
            }
        })?
    }

    /// From the first signal on: debug routes refuse, and paused workers
    /// go on (a pause must not hold shutdown).
    fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(gate) = self.paused.lock().unwrap_or_else(|p| p.into_inner()).take() {
            gate.open();
        }
    }
}

/// The tch-scope handler: its scopes are entered around every poll; the
/// context it captures carries inference mode and the deadline (counted
/// from the arrival, so queued time counts) to the worker. `grad`
/// (`x-debug-grad: on`, `--debug` only) captures it with grad mode on and
/// inference mode off instead: another scope state, never batched with
/// the default one.
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
    fault: Option<Fault>,
    grad: bool,
) -> Result<Output, ApiError> {
    let input = read_input(body, app.body_limit, app.body_timeout).await?;
    let ctx = if grad {
        tch_scope::scoped!(inference_mode(false), enable_grad => Context::capture())
    } else {
        Context::capture()
    };
    match &app.batched {
        Some(b) => b.predict(ctx, arrival + budget, input, fault, grad).await,
        None => app.run(Ticket::Scoped(ctx), input, fault).await,
    }
}

/// The plain handler: the same, timed by hand.
async fn predict_plain_handler(
    app: &App,
    arrival: Instant,
    budget: Duration,
    body: Body,
    fault: Option<Fault>,
) -> Result<Output, ApiError> {
    let start = Instant::now();
    let r = async {
        let input = read_input(body, app.body_limit, app.body_timeout).await?;
        app.run(Ticket::Plain(arrival + budget), input, fault).await
    }
    .await;
    let outcome = if r.is_ok() { "ok" } else { "failed" };
    metrics::histogram!("serve_plain_predict_seconds", "outcome" => outcome)
        .record(start.elapsed().as_secs_f64());
    r
}

async fn answer(
    app: &App,
    arrival: Instant,
    headers: &HeaderMap,
    body: Body,
) -> Result<Output, ApiError> {
    if !is_json(headers) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the body must be JSON (content-type: application/json)",
        ));
    }
    let b = budget(headers, app.default_deadline)?;
    let (fault, grad) = if app.debug {
        (debug_fault(headers)?, debug_grad(headers)?)
    } else {
        (None, false)
    };
    if app.plain {
        if grad {
            return Err(ApiError::bad_request(
                "x-debug-grad: on needs the tch-scope server (--plain captures no scopes)",
            ));
        }
        predict_plain_handler(app, arrival, b, body, fault).await
    } else {
        predict(app, arrival, b, body, fault, grad).await
    }
}

async fn predict_route(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let arrival = Instant::now();
    let id = app.request_id();
    let r = CatchUnwind(Box::pin(answer(&app, arrival, &headers, body)))
        .await
        .unwrap_or_else(|message| Err(ApiError::panicked("the handler", message)));
    let mut response = match r {
        Ok(out) => {
            let mut response = json_response(StatusCode::OK, &out);
            if let Some(ran) = out.ran {
                ran.headers(response.headers_mut());
            }
            response
        }
        Err(e) => {
            if let Some(detail) = &e.detail {
                eprintln!("serve: request {id}: {detail}");
            }
            error_response(&e, Some(&id))
        }
    };
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", v);
    }
    let status = response.status().as_str().to_string();
    metrics::counter!("http_requests_total", "path" => "/predict", "status" => status).increment(1);
    metrics::histogram!("http_request_duration_seconds", "path" => "/predict")
        .record(arrival.elapsed().as_secs_f64());
    metrics::gauge!("serve_queue_depth").set(app.queue_depth() as f64);
    response
}

async fn metrics_route(State(app): State<Arc<App>>) -> Response {
    let open = app.max_connections as usize - app.connections.available_permits();
    metrics::gauge!("serve_connections_open").set(open as f64);
    metrics::gauge!("serve_queue_depth").set(app.queue_depth() as f64);
    if let Some(b) = &app.batched {
        let stats = b.engine.stats();
        metrics::gauge!("serve_batch_largest").set(stats.largest_batch as f64);
        metrics::gauge!("serve_batch_split").set(stats.split_batches as f64);
    }
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        app.metrics.render(),
    )
        .into_response()
}

/// Why the server is short of model workers, if it is: every worker
/// ended, or some (named where the server knows which: a batcher thread
/// that ended before its first forward is only counted).
fn workers_lost(app: &App) -> Option<String> {
    let n = app.worker_count();
    let live = app.live();
    if live >= n {
        return None;
    }
    let gone: Vec<usize> = (0..n)
        .filter(|&i| app.workers.phase(i).0 == Phase::Gone)
        .collect();
    Some(if live == 0 {
        format!("no model worker is running: all {n} ended (gone: {gone:?})")
    } else {
        format!(
            "{} of {n} model workers ended (gone: {gone:?}); {live} running",
            n - live
        )
    })
}

/// 200 while every worker is alive and none has been on one job longer
/// than `--stuck-after-s`; 503 otherwise, naming them, with the reason.
async fn healthz(State(app): State<Arc<App>>) -> Response {
    #[derive(Serialize)]
    struct Worker {
        worker: usize,
        state: &'static str,
        for_s: f64,
    }
    #[derive(Serialize)]
    struct Body {
        status: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        stuck: Vec<usize>,
        gone: Vec<usize>,
        workers: Vec<Worker>,
    }
    let (mut stuck, mut gone, mut list) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..app.worker_count() {
        let (phase, for_) = app.workers.phase(i);
        match phase {
            Phase::Gone => gone.push(i),
            Phase::Busy | Phase::Starting if for_ > app.stuck_after => stuck.push(i),
            _ => {}
        }
        list.push(Worker {
            worker: i,
            state: phase.name(),
            for_s: for_.as_secs_f64(),
        });
    }
    let mut reasons: Vec<String> = workers_lost(&app).into_iter().collect();
    if !stuck.is_empty() {
        reasons.push(format!(
            "workers {stuck:?} on one job for more than {} s",
            app.stuck_after.as_secs_f64()
        ));
    }
    let ok = reasons.is_empty() && gone.is_empty();
    json_response(
        if ok {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        &Body {
            status: if ok { "ok" } else { "unhealthy" },
            reason: (!reasons.is_empty()).then(|| reasons.join("; ")),
            stuck,
            gone,
            workers: list,
        },
    )
}

/// 200 once every worker has run the model once (its warm-up, or a
/// request where the warm-up shape was refused); 503 before, from the
/// first shutdown signal on, and once a worker has ended (the server
/// serves on with those left, but takes no new traffic while its
/// `/healthz` asks for a restart), with the reason.
async fn readyz(State(app): State<Arc<App>>) -> Response {
    let (mut live, mut warmed) = (0, 0);
    for (i, slot) in app.workers.slots.iter().enumerate() {
        if app.workers.phase(i).0 != Phase::Gone {
            live += 1;
            warmed += usize::from(slot.warmed.load(Ordering::Relaxed));
        }
    }
    let live = live.min(app.live());
    let reason = if app.stopping.load(Ordering::Relaxed) {
        Some("stopping".to_string())
    } else if let Some(lost) = workers_lost(&app) {
        Some(lost)
    } else if warmed < live {
        Some(format!(
            "warming up: {warmed} of {live} workers have run the model"
        ))
    } else {
        None
    };
    let ready = reason.is_none();
    let mut body = serde_json::json!({ "ready": ready, "warmed": warmed, "workers": live });
    if let Some(reason) = reason {
        body["reason"] = reason.into();
    }
    json_response(
        if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        &body,
    )
}

async fn workers_route(State(app): State<Arc<App>>) -> Response {
    if app.stopping.load(Ordering::SeqCst) {
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "stopping").into_response();
    }
    let Ok(_turn) = tokio::time::timeout(DEBUG_WAIT, app.debug_turn.lock()).await else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "another debug request is running",
        )
        .into_response();
    };
    if app
        .paused
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_some()
    {
        return ApiError::new(StatusCode::CONFLICT, "the workers are paused").into_response();
    }
    let n = app.worker_count();
    let until = Instant::now() + DEBUG_WAIT;
    let meeting = Arc::new(Meeting::new(n));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The batcher's control requests: cancelled if this route goes.
    let mut tickets = Vec::new();
    for _ in 0..n {
        let job = Job::Check {
            meeting: Arc::clone(&meeting),
            reply: tx.clone(),
        };
        match app.send_control(job, until).await {
            Ok(t) => tickets.extend(t),
            Err(e) => return e.into_response(),
        }
    }
    drop(tx);
    // The meeting's own wait, and a little for the answers.
    let answers_by = until + DEBUG_WAIT + Duration::from_secs(1);
    let mut workers = Vec::with_capacity(n);
    while workers.len() < n {
        match tokio::time::timeout_at(answers_by.into(), rx.recv()).await {
            Ok(Some(Ok(w))) => workers.push(w),
            Ok(Some(Err(e))) => return ApiError::internal(e).into_response(),
            Ok(None) | Err(_) => {
                return ApiError::internal("a worker did not answer").into_response();
            }
        }
    }
    drop(tickets);
    workers.sort_by_key(|w: &WorkerReport| w.worker);
    workers.dedup_by_key(|w| w.worker);
    if workers.len() != n {
        return ApiError::internal("a worker took two checks").into_response();
    }
    #[derive(Serialize)]
    struct Body {
        server: &'static str,
        /// The batched server: each worker's state is read inside a
        /// control request's forward, which the batcher runs in inference
        /// mode (as it does any request that asks for no graph).
        batched: bool,
        requests: u64,
        workers: Vec<WorkerReport>,
        /// The batched server's control requests registered and not yet
        /// taken (this route's own are all taken by now): 0 unless one
        /// is on its way to a worker.
        controls_pending: usize,
    }
    let server = if app.plain { "plain" } else { "tch-scope" };
    let requests = app.requests.load(Ordering::Relaxed);
    let controls_pending = app.batched.as_ref().map_or(0, |b| b.controls.pending());
    json_response(
        StatusCode::OK,
        &Body {
            server,
            batched: app.batched.is_some(),
            requests,
            workers,
            controls_pending,
        },
    )
}

async fn pause_route(State(app): State<Arc<App>>) -> Response {
    let Ok(_turn) = tokio::time::timeout(DEBUG_WAIT, app.debug_turn.lock()).await else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "another debug request is running",
        )
        .into_response();
    };
    let gate = Arc::new(Gate::default());
    {
        let mut paused = app.paused.lock().unwrap_or_else(|p| p.into_inner());
        // Under the lock `stop` takes: a pause never starts after it.
        if app.stopping.load(Ordering::SeqCst) {
            return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "stopping").into_response();
        }
        if paused.is_some() {
            return ApiError::new(StatusCode::CONFLICT, "already paused").into_response();
        }
        *paused = Some(Arc::clone(&gate));
    }
    let n = app.worker_count();
    let until = Instant::now() + DEBUG_WAIT;
    let mut sent = Ok(());
    for _ in 0..n {
        match app.send_control(Job::Pause(Arc::clone(&gate)), until).await {
            // Kept until the worker is let go.
            Ok(Some(ticket)) => drop(tokio::spawn(ticket)),
            Ok(None) => {}
            Err(e) => {
                sent = Err(e);
                break;
            }
        }
    }
    while sent.is_ok() && gate.held() < n && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    if sent.is_ok() && gate.held() >= n {
        return json_response(StatusCode::OK, &serde_json::json!({ "paused": n }));
    }
    // Not all held: let go of those that are.
    let mut paused = app.paused.lock().unwrap_or_else(|p| p.into_inner());
    if paused.as_ref().is_some_and(|g| Arc::ptr_eq(g, &gate)) {
        *paused = None;
    }
    gate.open();
    match sent {
        Err(e) => e.into_response(),
        Ok(()) => ApiError::internal("the workers did not all stop").into_response(),
    }
}

async fn resume_route(State(app): State<Arc<App>>) -> Response {
    match app.paused.lock().unwrap_or_else(|p| p.into_inner()).take() {
        Some(gate) => {
            gate.open();
            json_response(
                StatusCode::OK,
                &serde_json::json!({ "resumed": app.worker_count() }),
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
    metrics::describe_gauge!("serve_connections_open", "Client connections open.");
    metrics::describe_gauge!(
        "serve_batch_largest",
        "The most requests one forward computed (the batched server)."
    );
    metrics::describe_gauge!(
        "serve_batch_split",
        "Batches that failed and ran again request by request (the batched server)."
    );
    metrics::describe_counter!(
        "serve_connections_closed_total",
        "Connections the server closed, by reason (idle, header_timeout)."
    );
    metrics::describe_counter!(
        "serve_jobs_skipped_total",
        "Queued requests dropped before the model ran, by reason."
    );
    tch_scope::report::describe_metrics();
    batch::describe_metrics();
    Ok(handle)
}

// ---- connections: tch_scope::serve::connections ---------------------------

/// The first SIGTERM or SIGINT sets `stop`; the next exits at once.
fn watch_signals(stop: watch::Sender<bool>, bound: Duration) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM: {e}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT: {e}"))?;
    // The name, and the status of a process a signal ended (128 + its
    // number).
    async fn next(
        term: &mut tokio::signal::unix::Signal,
        int: &mut tokio::signal::unix::Signal,
    ) -> (&'static str, i32) {
        tokio::select! {
            _ = term.recv() => ("SIGTERM", 143),
            _ = int.recv() => ("SIGINT", 130),
        }
    }
    tokio::spawn(async move {
        let (name, _) = next(&mut term, &mut int).await;
        eprintln!(
            "serve: {name}: stopping (in flight finished within {} s; another signal exits at once)",
            bound.as_secs_f64()
        );
        let _ = stop.send(true);
        let (name, code) = next(&mut term, &mut int).await;
        eprintln!("serve: {name} again: exiting now");
        std::process::exit(code);
    });
    Ok(())
}

/// Whether `path` names an AOTInductor package (`.pt2`, any case) rather
/// than a TorchScript file.
fn is_package(path: &std::path::Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("pt2"))
}

fn main() {
    // A usage error: clap's message and exit status 2; --help: exit 0.
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("serve: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    // One intra-op thread per worker: the workers are the parallelism
    // (worker threads copy this process value at their first parallel op).
    tch::set_num_threads(args.intra_op_threads);
    // Before the batcher's warm-up, whose batches it counts.
    let metrics = install_metrics()?;
    let pool = Arc::new(Workers::new(args.workers));
    // The tch-scope server batches unless `--max-batch 1`; `--plain` never.
    let batching = !args.plain && args.max_batch > 1;
    let mut batched = None;
    let served = |e: ScopeError| e.to_string();
    let engine = if is_package(&args.model) {
        // As many runners as workers: one runner would serialize them.
        let model = Package::options()
            .runners(args.workers)
            .load(&args.model)
            .map_err(|e| format!("cannot load {}: {e}", args.model.display()))?;
        if args.plain {
            Some(Engine::PlainPackage(model))
        } else if batching {
            let served = Inference::new(model).map_err(served)?;
            let b = Batched::start(served, &args, Arc::clone(&pool), |b| {
                BatchEngine::Package(Arc::new(b))
            })?;
            batched = Some(b);
            None
        } else {
            Some(Engine::ScopedPackage(
                Inference::new(model).map_err(served)?,
            ))
        }
    } else {
        let model = CModule::load(&args.model)
            .map_err(|e| format!("cannot load {}: {e}", args.model.display()))?;
        if args.plain {
            let mut model = model;
            model.set_eval();
            Some(Engine::Plain(model))
        } else if batching {
            let served = Inference::new(model).map_err(served)?;
            let b = Batched::start(served, &args, Arc::clone(&pool), |b| {
                BatchEngine::Module(Arc::new(b))
            })?;
            batched = Some(b);
            None
        } else {
            Some(Engine::Scoped(Inference::new(model).map_err(served)?))
        }
    };
    debug_assert!(engine.as_ref().is_none_or(|e| e.plain() == args.plain));
    let engine = engine.map(Arc::new);
    // What shutdown closes once every handler is gone.
    let closing = batched
        .as_ref()
        .map(|b: &Batched| (Arc::clone(&b.engine), Arc::clone(&b.controls)));

    let (tx, rx) = sync_channel::<Job>(args.queue);
    let rx = Arc::new(Mutex::new(rx));
    let depth = Arc::new(AtomicUsize::new(0));
    // The worker pool, without a batcher (it has threads of its own).
    let mut workers: Vec<JoinHandle<()>> = match &engine {
        None => Vec::new(),
        Some(engine) => (0..args.workers)
            .map(|id| {
                let w = WorkerCtx {
                    id,
                    jobs: Arc::clone(&rx),
                    engine: Arc::clone(engine),
                    depth: Arc::clone(&depth),
                    workers: Arc::clone(&pool),
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
    drop(rx);

    let connections = Arc::new(Semaphore::new(args.max_connections as usize));
    let app = Arc::new(App {
        batched,
        jobs: tx,
        depth,
        workers: pool,
        queue: args.queue,
        plain: args.plain,
        debug: args.debug,
        body_limit: args.body_limit,
        body_timeout: args.body_timeout,
        default_deadline: args.default_deadline,
        stuck_after: args.stuck_after,
        metrics,
        paused: Mutex::new(None),
        debug_turn: tokio::sync::Mutex::new(()),
        stopping: AtomicBool::new(false),
        requests: AtomicU64::new(0),
        connections: Arc::clone(&connections),
        max_connections: args.max_connections,
    });
    let mut router = Router::new()
        .route("/predict", post(predict_route))
        .route("/metrics", get(metrics_route))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz));
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
    let bound = args.shutdown_timeout;
    let drained = rt.block_on(async {
        let (stop_tx, mut stop) = watch::channel(false);
        let (abort_tx, abort) = watch::channel(false);
        watch_signals(stop_tx, bound)?;
        // The protocol's routes over the batcher (a warm-up run of theirs
        // first: it makes the outputs' metadata).
        let oip = match &app.batched {
            Some(b) => oip::routes(&args, b).await?,
            None => None,
        };
        let (router, oip_name) = match oip {
            Some((name, v2)) => (router.merge(v2), Some(name)),
            None => (router, None),
        };
        let listener = tokio::net::TcpListener::bind(args.addr)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.addr))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        let upkeep = app.metrics.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                upkeep.run_upkeep();
            }
        });
        let kind = if args.plain { "plain tch" } else { "tch-scope" };
        let format = if is_package(&args.model) {
            ".pt2 package"
        } else {
            "TorchScript"
        };
        let batches = if batching {
            format!(
                ", batches of up to {} within {} ms",
                args.max_batch,
                args.max_delay.as_millis()
            )
        } else {
            String::new()
        };
        let v2 = oip_name
            .map(|n| format!(", Open Inference Protocol as {n:?}"))
            .unwrap_or_default();
        println!(
            "listening on http://{local} ({kind}, {} workers, queue {}{batches}, {format} model {}{v2})",
            args.workers,
            args.queue,
            args.model.display()
        );

        // Accepts while under the cap: past it, connections wait in the
        // kernel's backlog and cost this process nothing.
        loop {
            let permit = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => break,
                p = Arc::clone(&connections).acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            let accepted = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => break,
                r = listener.accept() => r,
            };
            let tcp = match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors, or a connection reset
                    // before it was accepted: wait a little, go on.
                    eprintln!("serve: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            tokio::spawn(serve_connection(
                tcp,
                router.clone(),
                args.limits(),
                stop.clone(),
                abort.clone(),
                permit,
            ));
        }

        // Stopping: no new connections; the open ones close after their
        // request in flight (idle ones at once), within the bound.
        let until = Instant::now() + bound;
        drop(listener);
        app.stop();
        let all = args.max_connections;
        let drained = tokio::time::timeout_at(until.into(), connections.acquire_many(all))
            .await
            .is_ok();
        if !drained {
            let open = all as usize - connections.available_permits();
            eprintln!(
                "serve: {open} connection(s) still busy after {} s: closing them",
                bound.as_secs_f64()
            );
            let _ = abort_tx.send(true);
            let _ =
                tokio::time::timeout(Duration::from_secs(1), connections.acquire_many(all)).await;
        }
        // Every handler is gone: the last sender of the queue goes with the
        // router's state, and the workers end once it is empty.
        drop(router);
        drop(app);
        if let Some((engine, controls)) = closing {
            // Workers ended by `x-debug-fault: die` go; the batcher then
            // computes what is queued (its requests' clients are gone:
            // cancelled) and joins its threads, off this runtime.
            controls.graveyard.open();
            let close = std::thread::Builder::new()
                .name("batch-close".into())
                .spawn(move || close_batcher(engine))
                .map_err(|e| format!("cannot close the batcher: {e}"))?;
            workers.push(close);
        }
        // The workers finish what is queued (jobs whose client is gone are
        // skipped); give them what is left of the bound, at least 0.2 s.
        let workers_by = until.max(Instant::now() + Duration::from_millis(200));
        while !workers.iter().all(JoinHandle::is_finished) && Instant::now() < workers_by {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok::<_, String>(drained)
    })?;
    rt.shutdown_timeout(Duration::from_millis(100));

    if !workers.iter().all(JoinHandle::is_finished) {
        eprintln!("serve: workers still busy at the shutdown bound: exiting without them");
        std::process::exit(1);
    }
    for w in workers {
        let _ = w.join();
    }
    if let Some(Ok(Engine::Scoped(served))) = engine.map(Arc::try_unwrap) {
        // The model back in the modes it was loaded with.
        let model = served.into_inner();
        let training = model.modes().map(|m| m.iter().filter(|t| **t).count());
        println!("stopped; the model is back in its saved modes ({training:?} modules training)");
    }
    if drained {
        Ok(())
    } else {
        Err("requests were cut off at the shutdown bound".into())
    }
}
