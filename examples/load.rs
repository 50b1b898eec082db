//! The load client of `serve` (`make load`, docs/serving.md): starts the
//! servers it compares as real processes on loopback, in turn,
//! alternating, drives each with the same requests over keep-alive
//! HTTP/1.1 connections, and prints one line per server and the ratios.
//!
//! ```text
//! cargo run --release -p examples --example load -- [--servers unbatched,plain]
//!     [--model PATH]... [--reference FILE] [--requests N] [--concurrency C]
//!     [--rounds R] [--addr HOST:PORT] [--tolerance T] [--json] …
//! ```
//!
//! `--help` lists every option. The servers (`--servers`, in this order,
//! ABBA across rounds): `batched` (the tch-scope server, batching:
//! `serve --max-batch 32`), `unbatched` (the tch-scope server, one request
//! a forward: `--max-batch 1`), `plain` (`serve --plain`, plain tch) and
//! `fastapi` (the same model from Python: FastAPI on uvicorn with
//! `--workers` processes, `scripts/serve_fastapi.py`, installed by
//! `scripts/bootstrap-fastapi.sh`; TorchScript models only).
//!
//! `--model` may be given more than once: each model is served and driven
//! in turn, with one line per server and model. A path ending in `.pt2` is
//! an AOTInductor package, served by `serve --model m.pt2`; its reference
//! outputs here come from `tch_scope::aoti::Package` (tch has no loader
//! of its own for one). Without `--model`: tests/data/serve_mlp.pt.
//!
//! The inputs: without `--reference`, 256 inputs of 1 to 8 rows of 32
//! floats, each with the output the same model gives for it here,
//! sequentially. With `--reference FILE` (written by
//! `scripts/export_models.py load_mlp`), single rows and PyTorch's eval
//! output for each, computed in Python. The mix (fixed by the request's
//! index): 90 % valid (a 10 s deadline), 5 % with a tight deadline
//! (`x-deadline-ms` 0 or 1), 5 % malformed (bad JSON, `data` of the wrong
//! length, a shape the model refuses, a non-number, a body over the
//! server's limit; answered 400, or 422 for the shape). `wrong` counts 200
//! responses whose output differs from the reference by more than the
//! tolerance (absolute; 0: bitwise). The default tolerance: 1e-5 for
//! `batched` (a row computed in a batch may differ from the row alone in
//! the last bits) and against PyTorch's rows (`--reference`); bitwise for
//! the others. `expired_computed` counts requests sent already expired
//! (`x-deadline-ms: 0`) and answered 200: computed although expired.
//! `p50_ms` and `p99_ms` are over the 200 responses; `rps` counts every
//! response.
//!
//! With `--addr` it drives a server that is already running (one run, no
//! rounds): the tests start the server themselves.

#[path = "common/floats.rs"]
mod floats;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use clap::{Parser, ValueEnum};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tch::{CModule, Kind, Tensor};
use tch_scope::aoti::Package;

const DEFAULT_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/serve_mlp.pt");
/// The bootstrap's libtorch: its venv's `site-packages/torch`.
const LIBTORCH_LINK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../.libtorch");
const FASTAPI_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/serve_fastapi.py");
/// The features of the default model's input.
const FEATURES: usize = 32;
/// The body limit the spawned servers get (a malformed kind goes over it).
const BODY_LIMIT: usize = 65_536;
/// Distinct valid inputs (each with its reference output).
const POOL: usize = 256;
/// What a batching server's rows, and any server's rows against
/// PyTorch's (`--reference`), are held to by default.
const BATCHED_TOLERANCE: f32 = 1e-5;

/// A server `load` starts and drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ServerKind {
    /// The tch-scope server, batching (`serve --max-batch`, default 32).
    Batched,
    /// The tch-scope server, one request a forward (`serve --max-batch 1`).
    Unbatched,
    /// Plain tch (`serve --plain`).
    Plain,
    /// FastAPI on uvicorn with torch (`scripts/serve_fastapi.py`).
    Fastapi,
}

impl ServerKind {
    fn name(self) -> &'static str {
        match self {
            Self::Batched => "batched",
            Self::Unbatched => "unbatched",
            Self::Plain => "plain",
            Self::Fastapi => "fastapi",
        }
    }
}

/// Drives `serve` (and the Python server) with the same requests and
/// compares them (docs/serving.md).
#[derive(Debug, Clone, Parser)]
#[command(name = "load")]
struct Args {
    /// Requests per run, after the warm-up.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Connections, each with one request in flight.
    #[arg(long, default_value_t = 16, value_parser = at_least_one)]
    concurrency: usize,
    /// Rounds: every server runs once a round, in ABBA order.
    #[arg(long, default_value_t = 3, value_parser = at_least_one)]
    rounds: usize,
    /// A run stops after this long, whatever is left.
    #[arg(long, default_value_t = 120)]
    max_seconds: u64,
    /// The servers' model workers (FastAPI: processes); default: the
    /// Rust server's own (the core count), 2 for FastAPI.
    #[arg(long)]
    workers: Option<usize>,
    /// The Rust servers' `--queue`.
    #[arg(long, default_value_t = 256)]
    queue: usize,
    /// The servers to start and compare, in turn.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [ServerKind::Unbatched, ServerKind::Plain])]
    servers: Vec<ServerKind>,
    /// `--max-batch` of the `batched` server.
    #[arg(long, default_value_t = 32)]
    max_batch: usize,
    /// `--max-delay-ms` of the `batched` server (its default when absent).
    #[arg(long)]
    max_delay_ms: Option<u64>,
    /// The `serve` binary (default: beside this one).
    #[arg(long)]
    server: Option<PathBuf>,
    /// The python that runs the FastAPI server (default: the bootstrap's
    /// venv).
    #[arg(long)]
    python: Option<PathBuf>,
    /// A model to serve; more than once: each in turn.
    #[arg(long = "model")]
    models: Vec<PathBuf>,
    /// The model of this run (one of `models`).
    #[arg(skip)]
    model: PathBuf,
    /// PyTorch's inputs and outputs (`scripts/export_models.py load_mlp`):
    /// single-row requests held to PyTorch's rows.
    #[arg(long)]
    reference: Option<PathBuf>,
    /// Drive the server already running here (one run, no rounds).
    #[arg(long)]
    addr: Option<String>,
    /// Warm-up requests before each run, not counted.
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// The largest absolute difference from the reference a 200 may carry
    /// (0: bitwise); default: see the module docs.
    #[arg(long, value_parser = tolerance)]
    tolerance: Option<f32>,
    /// One JSON line per server instead of the table.
    #[arg(long)]
    json: bool,
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{s:?} is not a whole number of at least 1")),
    }
}

fn tolerance(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(t) if t >= 0.0 && t.is_finite() => Ok(t),
        _ => Err(format!("{s:?} is not a finite number of at least 0")),
    }
}

fn parse_args() -> Args {
    let mut a = Args::parse();
    if a.models.is_empty() {
        a.models.push(PathBuf::from(DEFAULT_MODEL));
    }
    if a.addr.is_some() && a.models.len() > 1 {
        clap_error("--addr drives one server: give one --model (its model)");
    }
    if a.reference.is_some() && a.models.len() > 1 {
        clap_error("--reference holds one model's rows: give one --model");
    }
    a.model = a.models[0].clone();
    a
}

fn clap_error(message: &str) -> ! {
    use clap::CommandFactory;
    Args::command()
        .error(clap::error::ErrorKind::ArgumentConflict, message)
        .exit()
}

// ---- the requests ----------------------------------------------------------

fn mix(mut x: u64) -> u64 {
    // splitmix64
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Valid,
    Tight,
    Malformed,
}

struct Req {
    class: Class,
    /// The pool input (valid and tight requests).
    pool: usize,
    deadline_ms: u64,
    body: Bytes,
}

struct Pool {
    /// Floats per row.
    features: usize,
    bodies: Vec<Bytes>,
    expected: Vec<Vec<f32>>,
    malformed: Vec<Bytes>,
}

fn json_body(shape: &[usize], data: &[f32]) -> Bytes {
    #[derive(Serialize)]
    struct Body<'a> {
        shape: &'a [usize],
        data: &'a [f32],
    }
    Bytes::from(serde_json::to_vec(&Body { shape, data }).unwrap_or_default())
}

/// Whether `path` names an AOTInductor package (as `serve` decides).
fn is_package(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("pt2"))
}

/// The model, loaded here for the reference outputs.
enum Reference {
    Script(CModule),
    Package(Package),
}

impl Reference {
    fn load(model: &Path) -> Result<Self, String> {
        let fail = |e: String| format!("cannot load {}: {e}", model.display());
        if is_package(model) {
            Package::options()
                .runners(1)
                .load(model)
                .map(Self::Package)
                .map_err(|e| fail(e.to_string()))
        } else {
            let mut m = CModule::load(model).map_err(|e| fail(e.to_string()))?;
            m.set_eval();
            Ok(Self::Script(m))
        }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor, String> {
        match self {
            Self::Script(m) => m.forward_ts(&[x]).map_err(|e| e.to_string()),
            Self::Package(p) => {
                let mut ys = p.run(&[x]).map_err(|e| e.to_string())?;
                if ys.len() == 1 {
                    Ok(ys.remove(0))
                } else {
                    Err(format!(
                        "the package returned {} tensors, not one",
                        ys.len()
                    ))
                }
            }
        }
    }
}

/// PyTorch's rows for a model (`scripts/export_models.py load_mlp`).
#[derive(Deserialize)]
struct PyTorchRows {
    features: usize,
    inputs: Vec<Vec<f32>>,
    outputs: Vec<Vec<f32>>,
}

/// The valid inputs, each with its reference output, and the malformed
/// bodies: from `reference` (single rows, PyTorch's outputs), else
/// generated here with the model's own outputs, one at a time.
fn pool(model: &Path, reference: Option<&Path>) -> Result<Pool, String> {
    let (features, bodies, expected) = match reference {
        Some(path) => {
            let text =
                std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let r: PyTorchRows =
                serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            let rows_fit = r.inputs.iter().all(|x| x.len() == r.features);
            if r.inputs.is_empty() || r.inputs.len() != r.outputs.len() || !rows_fit {
                return Err(format!(
                    "{}: needs as many `outputs` as `inputs`, each input of `features` floats",
                    path.display()
                ));
            }
            let bodies = r
                .inputs
                .iter()
                .map(|x| json_body(&[1, r.features], x))
                .collect();
            (r.features, bodies, r.outputs)
        }
        None => {
            let (bodies, expected) = generated(model)?;
            (FEATURES, bodies, expected)
        }
    };
    let f = features;
    let ones = vec![0.25f32; 4 * f];
    let big = vec![0.125f32; (BODY_LIMIT / 5 / f + 1) * f];
    let malformed = vec![
        Bytes::from(format!("{{\"shape\": [1, {f}], \"data\": [1.0, 2.0")),
        json_body(&[3, f], &ones),
        // The right number of values in a shape the model refuses (422).
        json_body(&[4 * f / 16, 16], &ones),
        Bytes::from_static(b"{\"shape\": [1, 2], \"data\": [1.0, \"two\"]}"),
        json_body(&[big.len() / f, f], &big),
    ];
    Ok(Pool {
        features,
        bodies,
        expected,
        malformed,
    })
}

/// Inputs of 1 to 8 rows of [`FEATURES`], and the model's output for each,
/// computed here, one at a time.
fn generated(model: &Path) -> Result<(Vec<Bytes>, Vec<Vec<f32>>), String> {
    tch::set_num_threads(1);
    let m = Reference::load(model)?;
    let mut bodies = Vec::with_capacity(POOL);
    let mut expected = Vec::with_capacity(POOL);
    for k in 0..POOL {
        let rows = 1 + k % 8;
        let data: Vec<f32> = (0..rows * FEATURES)
            .map(|j| {
                let h = mix((k as u64) << 32 | j as u64);
                // Uniform in [-2, 2), full f32 precision.
                (h >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
            })
            .collect();
        let y = tch::no_grad(|| -> Result<Vec<f32>, String> {
            let t = |e: tch::TchError| e.to_string();
            let x = Tensor::f_from_slice(&data)
                .and_then(|x| x.f_view([rows as i64, FEATURES as i64]))
                .map_err(t)?;
            let y = m.forward(&x)?.f_to_kind(Kind::Float).map_err(t)?;
            Vec::<f32>::try_from(y.f_reshape([-1]).map_err(t)?).map_err(t)
        })
        .map_err(|e| format!("the reference forward failed: {e}"))?;
        bodies.push(json_body(&[rows, FEATURES], &data));
        expected.push(y);
    }
    Ok((bodies, expected))
}

fn request(i: usize, pool: &Pool) -> Req {
    let h = mix(0x5eed ^ (i as u64).wrapping_mul(0x1_0000_0001));
    let p = (h >> 8) as usize % pool.bodies.len();
    match h % 100 {
        0..=4 => Req {
            class: Class::Malformed,
            pool: 0,
            deadline_ms: 10_000,
            body: pool.malformed[(h >> 20) as usize % pool.malformed.len()].clone(),
        },
        5..=9 => Req {
            class: Class::Tight,
            pool: p,
            deadline_ms: if h % 100 < 8 { 0 } else { 1 },
            body: pool.bodies[p].clone(),
        },
        _ => Req {
            class: Class::Valid,
            pool: p,
            deadline_ms: 10_000,
            body: pool.bodies[p].clone(),
        },
    }
}

// ---- one run ---------------------------------------------------------------

#[derive(Debug, Default, Clone, Serialize)]
struct Counts {
    requests: usize,
    ok: usize,
    deadline: usize,
    rejected: usize,
    malformed: usize,
    wrong: usize,
    /// Requests sent already expired (`x-deadline-ms: 0`) answered 200.
    expired_computed: usize,
    /// Other statuses, transport errors, a status that does not fit the
    /// request (a malformed one answered 200, a valid one 400).
    errors: usize,
    sent_valid: usize,
    sent_tight: usize,
    sent_zero_deadline: usize,
    sent_malformed: usize,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.requests += o.requests;
        self.ok += o.ok;
        self.deadline += o.deadline;
        self.rejected += o.rejected;
        self.malformed += o.malformed;
        self.wrong += o.wrong;
        self.expired_computed += o.expired_computed;
        self.errors += o.errors;
        self.sent_valid += o.sent_valid;
        self.sent_tight += o.sent_tight;
        self.sent_zero_deadline += o.sent_zero_deadline;
        self.sent_malformed += o.sent_malformed;
    }
}

#[derive(Debug, Default)]
struct RunResult {
    counts: Counts,
    latencies: Vec<Duration>,
    elapsed: Duration,
    first_error: Option<String>,
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: &str) -> Result<Sender, String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

async fn send(
    sender: &mut Sender,
    addr: &str,
    method: &str,
    path: &str,
    deadline_ms: Option<u64>,
    body: Bytes,
) -> Result<(u16, Bytes), String> {
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr)
        .header("content-type", "application/json");
    if let Some(ms) = deadline_ms {
        b = b.header("x-deadline-ms", ms.to_string());
    }
    let req = b.body(Full::new(body)).map_err(|e| e.to_string())?;
    sender.ready().await.map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}

#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow)]
    data: &'a RawValue,
}

/// Whether a 200 body carries the reference output: bitwise when
/// `tolerance` is 0, else each value within `tolerance` of it.
fn matches(body: &[u8], expected: &[f32], tolerance: f32) -> bool {
    let Ok(a) = serde_json::from_slice::<Answer<'_>>(body) else {
        return false;
    };
    let Ok(got) = floats::parse_f32_array(a.data.get()) else {
        return false;
    };
    got.len() == expected.len()
        && got
            .iter()
            .zip(expected)
            .all(|(g, e)| g.to_bits() == e.to_bits() || (g - e).abs() <= tolerance)
}

/// Sends requests `0..n` (each to the next free connection) over
/// `concurrency` connections, stopping early after `max`.
async fn drive(
    addr: &str,
    pool: Arc<Pool>,
    n: usize,
    concurrency: usize,
    max: Duration,
    tolerance: f32,
) -> RunResult {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (next, pool, addr) = (Arc::clone(&next), Arc::clone(&pool), addr.to_string());
        tasks.push(tokio::spawn(async move {
            let mut r = RunResult::default();
            let mut sender: Option<Sender> = None;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || start.elapsed() > max {
                    break;
                }
                let req = request(i, &pool);
                r.counts.requests += 1;
                match req.class {
                    Class::Valid => r.counts.sent_valid += 1,
                    Class::Tight => {
                        r.counts.sent_tight += 1;
                        if req.deadline_ms == 0 {
                            r.counts.sent_zero_deadline += 1;
                        }
                    }
                    Class::Malformed => r.counts.sent_malformed += 1,
                }
                let t0 = Instant::now();
                let answer = async {
                    if sender.as_ref().is_none_or(|s| s.is_closed()) {
                        sender = Some(connect(&addr).await?);
                    }
                    let s = sender.as_mut().ok_or("no connection")?;
                    send(
                        s,
                        &addr,
                        "POST",
                        "/predict",
                        Some(req.deadline_ms),
                        req.body,
                    )
                    .await
                };
                let answer = tokio::time::timeout(Duration::from_secs(30), answer)
                    .await
                    .unwrap_or_else(|_| Err("no answer in 30 s".into()));
                let took = t0.elapsed();
                let c = &mut r.counts;
                match (answer, req.class) {
                    (Ok((200, body)), Class::Valid | Class::Tight) => {
                        c.ok += 1;
                        r.latencies.push(took);
                        if req.deadline_ms == 0 {
                            c.expired_computed += 1;
                        }
                        if !matches(&body, &pool.expected[req.pool], tolerance) {
                            c.wrong += 1;
                        }
                    }
                    (Ok((504, _)), Class::Valid | Class::Tight) => c.deadline += 1,
                    (Ok((503, _)), Class::Valid | Class::Tight) => c.rejected += 1,
                    // 422: the shape the model refuses.
                    (Ok((400 | 422, _)), Class::Malformed) => c.malformed += 1,
                    (Ok((status, body)), class) => {
                        c.errors += 1;
                        r.first_error.get_or_insert_with(|| {
                            format!(
                                "{class:?} request {i} got {status}: {}",
                                String::from_utf8_lossy(&body)
                            )
                        });
                    }
                    (Err(e), _) => {
                        c.errors += 1;
                        sender = None;
                        r.first_error.get_or_insert(e);
                    }
                }
            }
            r
        }));
    }
    let mut total = RunResult::default();
    for t in tasks {
        match t.await {
            Ok(r) => {
                total.counts.add(&r.counts);
                total.latencies.extend(r.latencies);
                if total.first_error.is_none() {
                    total.first_error = r.first_error;
                }
            }
            Err(e) => {
                total.counts.errors += 1;
                total.first_error.get_or_insert(e.to_string());
            }
        }
    }
    total.elapsed = start.elapsed();
    total
}

/// `GET /debug/workers`: whether every worker's grad mode, inference mode
/// and model modes are what they were at its start, and operators run.
async fn workers_as_before(addr: &str) -> Result<usize, String> {
    let mut s = connect(addr).await?;
    let (status, body) = send(&mut s, addr, "GET", "/debug/workers", None, Bytes::new()).await?;
    if status != 200 {
        return Err(format!(
            "/debug/workers: {status} {}",
            String::from_utf8_lossy(&body)
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    let workers = v["workers"].as_array().ok_or("no workers")?;
    for w in workers {
        if w["at_start"] != w["now"] || w["now"]["ops_ok"] != true {
            return Err(format!("a worker changed: {w}"));
        }
    }
    Ok(workers.len())
}

// ---- the servers -----------------------------------------------------------

/// A server process (and, for FastAPI, its worker processes: one process
/// group), killed when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        // The group's id is the leader's pid (`process_group(0)`).
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The bootstrap venv's python: `bin/python` four levels above its
/// `site-packages/torch` (the link resolved first: python finds its venv
/// from the path it is started by).
fn bootstrap_python() -> Result<PathBuf, String> {
    let torch = std::fs::canonicalize(LIBTORCH_LINK)
        .map_err(|e| format!("{LIBTORCH_LINK}: {e} (run `make libtorch`, or give --python)"))?;
    let venv = torch
        .ancestors()
        .nth(4)
        .ok_or_else(|| format!("{} is not inside a venv", torch.display()))?;
    Ok(venv.join("bin/python"))
}

fn start_server(args: &Args, pool: &Pool, kind: ServerKind) -> Result<Server, String> {
    let (mut cmd, built_by) = if kind == ServerKind::Fastapi {
        let python = match &args.python {
            Some(p) => p.clone(),
            None => bootstrap_python()?,
        };
        let mut cmd = Command::new(python);
        cmd.args(["-W", "ignore", FASTAPI_SCRIPT, "--workers"])
            .arg(args.workers.unwrap_or(2).to_string());
        (cmd, "bash scripts/bootstrap-fastapi.sh")
    } else {
        let bin = match &args.server {
            Some(p) => p.clone(),
            None => std::env::current_exe()
                .map_err(|e| e.to_string())?
                .with_file_name("serve"),
        };
        let mut cmd = Command::new(bin);
        cmd.args(["--debug", "--queue"])
            .arg(args.queue.to_string())
            .arg("--warmup-shape")
            .arg(format!("1,{}", pool.features));
        if let Some(w) = args.workers {
            cmd.arg("--workers").arg(w.to_string());
        }
        match kind {
            ServerKind::Batched => {
                cmd.arg("--max-batch").arg(args.max_batch.to_string());
                if let Some(ms) = args.max_delay_ms {
                    cmd.arg("--max-delay-ms").arg(ms.to_string());
                }
            }
            ServerKind::Unbatched => {
                cmd.args(["--max-batch", "1"]);
            }
            ServerKind::Plain => {
                cmd.arg("--plain");
            }
            ServerKind::Fastapi => {}
        }
        (cmd, "cargo build --release -p examples --example serve")
    };
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.args(["--addr", "127.0.0.1:0", "--body-limit"])
        .arg(BODY_LIMIT.to_string())
        .arg("--model")
        .arg(&args.model)
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| {
        format!(
            "cannot start {:?}: {e} (set it up: {built_by})",
            cmd.get_program()
        )
    })?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = std::io::BufReader::new(stdout).lines();
        if let Some(Ok(l)) = lines.next() {
            let _ = tx.send(l);
        }
        // Keep reading so the server never blocks on a full pipe.
        for _ in lines {}
    });
    let mut server = Server {
        child,
        addr: String::new(),
    };
    let line = rx.recv_timeout(Duration::from_secs(60)).map_err(|_| {
        format!(
            "the {} server did not say where it listens within 60 s",
            kind.name()
        )
    })?;
    server.addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .ok_or_else(|| format!("unexpected first line: {line}"))?
        .to_string();
    Ok(server)
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e3
}

#[derive(Debug, Serialize)]
struct Summary {
    server: String,
    #[serde(flatten)]
    counts: Counts,
    p50_ms: f64,
    p99_ms: f64,
    rps: f64,
    seconds: f64,
    workers_checked: usize,
    first_error: Option<String>,
}

#[derive(Default)]
struct Acc {
    counts: Counts,
    latencies: Vec<Duration>,
    elapsed: Duration,
    workers: usize,
    first_error: Option<String>,
}

impl Acc {
    fn summary(&mut self, server: &str) -> Summary {
        self.latencies.sort();
        Summary {
            server: server.into(),
            counts: self.counts.clone(),
            p50_ms: percentile(&self.latencies, 0.50),
            p99_ms: percentile(&self.latencies, 0.99),
            rps: self.counts.requests as f64 / self.elapsed.as_secs_f64().max(1e-9),
            seconds: self.elapsed.as_secs_f64(),
            workers_checked: self.workers,
            first_error: self.first_error.clone(),
        }
    }
}

fn line(s: &Summary, width: usize) -> String {
    let c = &s.counts;
    format!(
        "{:<width$} requests={} ok={} deadline={} rejected={} malformed={} wrong={} expired_computed={} p50_ms={:.3} p99_ms={:.3} rps={:.1}",
        format!("{}:", s.server),
        c.requests,
        c.ok,
        c.deadline,
        c.rejected,
        c.malformed,
        c.wrong,
        c.expired_computed,
        s.p50_ms,
        s.p99_ms,
        s.rps
    )
}

async fn one_run(
    addr: &str,
    pool: &Arc<Pool>,
    args: &Args,
    tolerance: f32,
    check_workers: bool,
    acc: &mut Acc,
) -> Result<(), String> {
    // Warm-up: not counted.
    let _ = drive(
        addr,
        Arc::clone(pool),
        args.warmup,
        args.concurrency,
        Duration::from_secs(30),
        tolerance,
    )
    .await;
    let r = drive(
        addr,
        Arc::clone(pool),
        args.requests,
        args.concurrency,
        Duration::from_secs(args.max_seconds),
        tolerance,
    )
    .await;
    acc.counts.add(&r.counts);
    acc.latencies.extend(r.latencies);
    acc.elapsed += r.elapsed;
    if acc.first_error.is_none() {
        acc.first_error = r.first_error;
    }
    if check_workers {
        acc.workers = workers_as_before(addr).await?;
    }
    Ok(())
}

fn main() {
    let args = parse_args();
    match run(&args) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("load: {e}");
            std::process::exit(1);
        }
    }
}

/// Ok(false) when a check failed (wrong outputs, errors, a worker changed,
/// an expired request computed). Each `--model` in turn.
fn run(args: &Args) -> Result<bool, String> {
    let mut fine = true;
    for model in &args.models {
        let mut one = args.clone();
        one.model.clone_from(model);
        // With several models each line names its model's file.
        let label = (args.models.len() > 1).then(|| {
            model.file_name().map_or_else(
                || model.display().to_string(),
                |n| n.to_string_lossy().into(),
            )
        });
        fine &= run_model(&one, label.as_deref())?;
    }
    Ok(fine)
}

/// The tolerance a server's rows are held to (see the module docs).
fn tolerance_for(args: &Args, kind: Option<ServerKind>) -> f32 {
    args.tolerance.unwrap_or(
        if args.reference.is_some() || kind == Some(ServerKind::Batched) {
            BATCHED_TOLERANCE
        } else {
            0.0
        },
    )
}

/// One model: every server, every round.
fn run_model(args: &Args, label: Option<&str>) -> Result<bool, String> {
    let pool = Arc::new(pool(&args.model, args.reference.as_deref())?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut results: Vec<(&str, Acc)> = Vec::new();
    if let Some(addr) = &args.addr {
        let mut acc = Acc::default();
        let tolerance = tolerance_for(args, None);
        rt.block_on(one_run(addr, &pool, args, tolerance, true, &mut acc))?;
        results.push(("server", acc));
    } else {
        let servers = &args.servers;
        results = servers.iter().map(|k| (k.name(), Acc::default())).collect();
        for round in 0..args.rounds {
            // ABBA: the order reverses every other round.
            let order: Vec<usize> = if round % 2 == 0 {
                (0..servers.len()).collect()
            } else {
                (0..servers.len()).rev().collect()
            };
            for k in order {
                let kind = servers[k];
                let server = start_server(args, &pool, kind)?;
                rt.block_on(one_run(
                    &server.addr,
                    &pool,
                    args,
                    tolerance_for(args, Some(kind)),
                    kind != ServerKind::Fastapi,
                    &mut results[k].1,
                ))?;
                drop(server);
            }
        }
    }
    let summaries: Vec<Summary> = results
        .iter_mut()
        .map(|(n, a)| match label {
            Some(l) => a.summary(&format!("{n} {l}")),
            None => a.summary(n),
        })
        .collect();
    let width = summaries
        .iter()
        .map(|s| s.server.len() + 1)
        .max()
        .unwrap_or(0)
        .max(9);
    let mut fine = true;
    for s in &summaries {
        if args.json {
            println!("{}", serde_json::to_string(s).map_err(|e| e.to_string())?);
        } else {
            println!("{}", line(s, width));
        }
        let c = &s.counts;
        if c.wrong > 0 || c.errors > 0 || c.expired_computed > 0 {
            fine = false;
            eprintln!(
                "load: {}: wrong={} errors={} expired_computed={} (first: {:?})",
                s.server, c.wrong, c.errors, c.expired_computed, s.first_error
            );
        }
    }
    if !args.json {
        let of = label.map(|l| format!(" {l}")).unwrap_or_default();
        for (i, a) in summaries.iter().enumerate() {
            for b in &summaries[i + 1..] {
                println!(
                    "ratios{of} ({} / {}): rps={:.4} p50={:.4} p99={:.4}  ({} rounds, {} requests each, {} at a time)",
                    a.server,
                    b.server,
                    a.rps / b.rps,
                    a.p50_ms / b.p50_ms,
                    a.p99_ms / b.p99_ms,
                    args.rounds,
                    args.requests,
                    args.concurrency
                );
            }
        }
    }
    Ok(fine)
}
