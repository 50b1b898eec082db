//! The load client of `serve` (`make load`, docs/serving.md): starts the
//! tch-scope server and the `--plain` one as real processes on loopback,
//! in turn, alternating, drives each with the same requests over
//! keep-alive HTTP/1.1 connections, and prints one line per server and
//! the ratios.
//!
//! ```text
//! cargo run --release -p examples --example load -- [--requests N] [--concurrency C]
//!     [--rounds R] [--max-seconds S] [--workers N] [--queue N] [--which both|scope|plain]
//!     [--model PATH]... [--addr HOST:PORT] [--tolerance T] [--json]
//! ```
//!
//! `--model` may be given more than once: each model is served and driven
//! in turn (every round of every server for the first model, then the
//! next), with one line per server and model. A path ending in `.pt2` is
//! an AOTInductor package, served by `serve --model m.pt2`; its reference
//! outputs here come from `tch_scope::aoti::Package` (tch has no loader
//! of its own for one). Without `--model`: tests/data/serve_mlp.pt.
//!
//! The mix (fixed by the request's index): 90 % valid (1 to 8 rows of 32
//! floats, a 10 s deadline), 5 % with a tight deadline (`x-deadline-ms` 0
//! or 1), 5 % malformed (bad JSON, `data` of the wrong length, a shape the
//! model refuses, a non-number, a body over the server's limit; answered
//! 400, or 422 for the shape). `wrong`
//! counts 200 responses whose output differs from what the same model
//! gives for the input here, sequentially: bitwise, or by more than
//! `--tolerance` (absolute). The tch-scope server batches requests by
//! default (`serve --max-batch`), and a row computed in a batch may
//! differ from the row alone in the last bits: when load starts the
//! servers itself, the tch-scope one is held to 1e-5 and the plain one
//! bitwise unless `--tolerance` says otherwise; with `--addr`, bitwise
//! unless it says otherwise. `p50_ms` and `p99_ms` are
//! over the 200 responses; `rps` counts every response.
//!
//! With `--addr` it drives a server that is already running (one run, no
//! rounds): the tests start the server themselves.

#[path = "common/floats.rs"]
mod floats;

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tch::{CModule, Kind, Tensor};
use tch_scope::aoti::Package;

const USAGE: &str = "usage: load [--requests N] [--concurrency C] [--rounds R] [--max-seconds S] \
[--workers N] [--queue N] [--which both|scope|plain] [--server PATH] [--model PATH]... \
[--addr HOST:PORT] [--warmup N] [--tolerance T] [--json]";

const DEFAULT_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/serve_mlp.pt");
/// The features of the default model's input.
const FEATURES: usize = 32;
/// The body limit the spawned servers get (a malformed kind goes over it).
const BODY_LIMIT: usize = 65_536;
/// Distinct valid inputs (each with its reference output).
const POOL: usize = 256;

#[derive(Debug, Clone)]
struct Args {
    requests: usize,
    concurrency: usize,
    rounds: usize,
    max_seconds: u64,
    workers: Option<usize>,
    queue: usize,
    which: String,
    server: Option<PathBuf>,
    /// The model of this run (one of `models`).
    model: PathBuf,
    /// Every `--model`, in turn.
    models: Vec<PathBuf>,
    addr: Option<String>,
    warmup: usize,
    /// The largest absolute difference from the reference a 200 may
    /// carry; `None`: the server's default (see the module docs).
    tolerance: Option<f32>,
    json: bool,
}

/// What a batching server's rows are held to by default.
const BATCHED_TOLERANCE: f32 = 1e-5;

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        requests: 20_000,
        concurrency: 16,
        rounds: 3,
        max_seconds: 120,
        workers: None,
        queue: 256,
        which: "both".into(),
        server: None,
        model: PathBuf::from(DEFAULT_MODEL),
        models: Vec::new(),
        addr: None,
        warmup: 200,
        tolerance: None,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    fn value<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
        v.parse().map_err(|_| format!("{flag}: cannot read {v:?}"))
    }
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--requests" => a.requests = value(&flag, it.next())?,
            "--concurrency" => a.concurrency = value(&flag, it.next())?,
            "--rounds" => a.rounds = value(&flag, it.next())?,
            "--max-seconds" => a.max_seconds = value(&flag, it.next())?,
            "--workers" => a.workers = Some(value(&flag, it.next())?),
            "--queue" => a.queue = value(&flag, it.next())?,
            "--which" => a.which = value(&flag, it.next())?,
            "--server" => a.server = Some(value(&flag, it.next())?),
            "--model" => a.models.push(value(&flag, it.next())?),
            "--addr" => a.addr = Some(value(&flag, it.next())?),
            "--warmup" => a.warmup = value(&flag, it.next())?,
            "--tolerance" => {
                let t: f32 = value(&flag, it.next())?;
                if !(t >= 0.0 && t.is_finite()) {
                    return Err("--tolerance must be a finite number, at least 0".into());
                }
                a.tolerance = Some(t);
            }
            "--json" => a.json = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.models.is_empty() {
        a.models.push(PathBuf::from(DEFAULT_MODEL));
    }
    if a.addr.is_some() && a.models.len() > 1 {
        return Err("--addr drives one server: give one --model (its model)".into());
    }
    a.model = a.models[0].clone();
    if a.concurrency == 0 || a.rounds == 0 {
        return Err("--concurrency and --rounds must be at least 1".into());
    }
    if !["both", "scope", "plain"].contains(&a.which.as_str()) {
        return Err("--which: both, scope or plain".into());
    }
    Ok(a)
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
fn is_package(path: &std::path::Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("pt2"))
}

/// The model, loaded here for the reference outputs.
enum Reference {
    Script(CModule),
    Package(Package),
}

impl Reference {
    fn load(model: &std::path::Path) -> Result<Self, String> {
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

/// The valid inputs, each with the model's output for it computed here,
/// one at a time, and the malformed bodies.
fn pool(model: &std::path::Path) -> Result<Pool, String> {
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
    let ones = vec![0.25f32; 4 * FEATURES];
    let big = vec![0.125f32; (BODY_LIMIT / 5 / FEATURES + 1) * FEATURES];
    let malformed = vec![
        Bytes::from_static(b"{\"shape\": [1, 32], \"data\": [1.0, 2.0"),
        json_body(&[3, FEATURES], &ones),
        json_body(&[8, 16], &ones),
        Bytes::from_static(b"{\"shape\": [1, 2], \"data\": [1.0, \"two\"]}"),
        json_body(&[big.len() / FEATURES, FEATURES], &big),
    ];
    Ok(Pool {
        bodies,
        expected,
        malformed,
    })
}

fn request(i: usize, pool: &Pool) -> Req {
    let h = mix(0x5eed ^ (i as u64).wrapping_mul(0x1_0000_0001));
    let p = (h >> 8) as usize % POOL;
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

/// A server process, killed when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(args: &Args, plain: bool) -> Result<Server, String> {
    let bin = match &args.server {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("serve"),
    };
    let mut cmd = Command::new(&bin);
    cmd.args(["--addr", "127.0.0.1:0", "--debug", "--body-limit"])
        .arg(BODY_LIMIT.to_string())
        .arg("--queue")
        .arg(args.queue.to_string())
        .arg("--model")
        .arg(&args.model)
        .stdout(Stdio::piped());
    if let Some(w) = args.workers {
        cmd.arg("--workers").arg(w.to_string());
    }
    if plain {
        cmd.arg("--plain");
    }
    let mut child = cmd.spawn().map_err(|e| {
        format!(
            "cannot start {}: {e} (build it: cargo build --release -p examples --example serve)",
            bin.display()
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
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .map_err(|_| "the server did not say where it listens within 60 s")?;
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
        "{:<width$} requests={} ok={} deadline={} rejected={} malformed={} wrong={} p50_ms={:.3} p99_ms={:.3} rps={:.1}",
        format!("{}:", s.server),
        c.requests,
        c.ok,
        c.deadline,
        c.rejected,
        c.malformed,
        c.wrong,
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
    acc.workers = workers_as_before(addr).await?;
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("load: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    match run(&args) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("load: {e}");
            std::process::exit(1);
        }
    }
}

/// Ok(false) when a check failed (wrong outputs, errors, a worker changed).
/// Each `--model` in turn.
fn run(args: &Args) -> Result<bool, String> {
    let mut fine = true;
    for model in &args.models {
        let mut one = args.clone();
        one.model = model.clone();
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

/// One model: every server, every round.
fn run_model(args: &Args, label: Option<&str>) -> Result<bool, String> {
    let pool = Arc::new(pool(&args.model)?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut results: Vec<(&str, Acc)> = Vec::new();
    if let Some(addr) = &args.addr {
        let mut acc = Acc::default();
        let tolerance = args.tolerance.unwrap_or(0.0);
        rt.block_on(one_run(addr, &pool, args, tolerance, &mut acc))?;
        results.push(("server", acc));
    } else {
        let servers: &[(&str, bool)] = match args.which.as_str() {
            "scope" => &[("tch-scope", false)],
            "plain" => &[("plain", true)],
            _ => &[("tch-scope", false), ("plain", true)],
        };
        results = servers.iter().map(|(n, _)| (*n, Acc::default())).collect();
        for round in 0..args.rounds {
            // ABBA: each server goes first in every other round.
            let order: Vec<usize> = if round % 2 == 0 {
                (0..servers.len()).collect()
            } else {
                (0..servers.len()).rev().collect()
            };
            for k in order {
                let plain = servers[k].1;
                let server = start_server(args, plain)?;
                let tolerance =
                    args.tolerance
                        .unwrap_or(if plain { 0.0 } else { BATCHED_TOLERANCE });
                rt.block_on(one_run(
                    &server.addr,
                    &pool,
                    args,
                    tolerance,
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
        if s.counts.wrong > 0 || s.counts.errors > 0 {
            fine = false;
            eprintln!(
                "load: {}: wrong={} errors={} (first: {:?})",
                s.server, s.counts.wrong, s.counts.errors, s.first_error
            );
        }
    }
    if let [a, b] = summaries.as_slice()
        && !args.json
    {
        let of = label.map(|l| format!(" {l}")).unwrap_or_default();
        println!(
            "ratios{of} (tch-scope / plain): rps={:.4} p50={:.4} p99={:.4}  ({} rounds, {} requests each, {} at a time)",
            a.rps / b.rps,
            a.p50_ms / b.p50_ms,
            a.p99_ms / b.p99_ms,
            args.rounds,
            args.requests,
            args.concurrency
        );
    }
    Ok(fine)
}
