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
//! a forward: `--max-batch 1`), `plain` (plain tch: the tests' server,
//! `serve-lab --plain`) and `fastapi` (the same model from Python: FastAPI
//! on uvicorn with `--workers` processes, `scripts/serve_fastapi.py`,
//! installed by `scripts/bootstrap-fastapi.sh`; TorchScript models only)
//! and `mlserver`
//! (Seldon's MLServer with adaptive batching, `--max-batch` rows or 2 ms,
//! and `--workers` parallel workers, default 2, running
//! `scripts/mlserver_runtime.py`; installed by
//! `scripts/bootstrap-mlserver.sh`; TorchScript models only).
//!
//! The protocol (`--protocol`, one for all or one per server; each
//! server's line says which it got):
//! the tch-scope server is driven over the Open Inference Protocol with
//! binary tensor data (`POST /v2/models/{stem}/infer`) when it answers
//! `GET /v2/health/ready` with 200, else over its own JSON (`/predict`);
//! MLServer over the protocol with JSON tensors (its REST API has no
//! binary extension); FastAPI over `/predict`.
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
//! server's limit; answered 400, or 422 for the shape; over the binary
//! protocol: a header length past the body, a header that is not JSON,
//! data short of the shape, an unknown input, a body over the limit;
//! 400, 413 or 422). With `--valid-only` every request is valid (MLServer
//! honours no `x-deadline-ms`: a run with it needs the flag). `wrong` counts 200
//! responses whose output differs from the reference by more than the
//! tolerance (absolute; 0: bitwise). The default tolerance: 1e-5 for
//! `batched` (a row computed in a batch may differ from the row alone in
//! the last bits) and against PyTorch's rows (`--reference`); bitwise for
//! the others. `expired_computed` counts requests sent already expired
//! (`x-deadline-ms: 0`) and answered 200: computed although expired.
//! `p50_ms` and `p99_ms` are over the 200 responses; `rps` counts every
//! response; `cpu_ms_per_req` is the server's CPU time (all its
//! processes, from /proc) over the counted requests, per request.
//!
//! With `--addr` it drives a server that is already running (one run, no
//! rounds): the tests start the server themselves.

#[path = "load/client.rs"]
mod client;
#[path = "common/floats.rs"]
mod floats;
#[path = "load/limit.rs"]
mod limit;
#[path = "load/oip.rs"]
mod oip;
#[path = "load/report.rs"]
mod report;
#[path = "load/requests.rs"]
mod requests;
#[path = "load/servers.rs"]
mod servers;

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Parser, ValueEnum};

use client::Target;
use report::Acc;
use requests::Protocol;

const DEFAULT_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/serve_mlp.pt");
const FASTAPI_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/serve_fastapi.py");
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
    /// Plain tch (the tests' server: `serve-lab --plain`).
    Plain,
    /// FastAPI on uvicorn with torch (`scripts/serve_fastapi.py`).
    Fastapi,
    /// MLServer with adaptive batching (`scripts/mlserver_runtime.py`).
    Mlserver,
}

impl ServerKind {
    fn name(self) -> &'static str {
        match self {
            Self::Batched => "batched",
            Self::Unbatched => "unbatched",
            Self::Plain => "plain",
            Self::Fastapi => "fastapi",
            Self::Mlserver => "mlserver",
        }
    }

    /// Whether it is a tch-scope server (`serve`, or `serve-lab` with its
    /// `/debug/workers`), whose workers `load` checks after a run.
    fn is_serve(self) -> bool {
        matches!(self, Self::Batched | Self::Unbatched | Self::Plain)
    }
}

/// Drives `serve` (and the Python servers) with the same requests and
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
    /// The servers' model workers (FastAPI: processes; MLServer: parallel
    /// workers); default: each Rust server's own, 2 for the Python
    /// servers.
    #[arg(long)]
    workers: Option<usize>,
    /// The Rust servers' `--queue`.
    #[arg(long, default_value_t = 256)]
    queue: usize,
    /// The servers to start and compare, in turn.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [ServerKind::Unbatched, ServerKind::Plain])]
    servers: Vec<ServerKind>,
    /// `--max-batch` of the `batched` server (MLServer: `max_batch_size`).
    #[arg(long, default_value_t = 32)]
    max_batch: usize,
    /// `--max-delay-ms` of the `batched` server (its default when absent;
    /// MLServer's `max_batch_time`: 2 ms when absent).
    #[arg(long)]
    max_delay_ms: Option<u64>,
    /// The encoding of the requests: one for every server, or one per
    /// server in `--servers`' order (the same server twice, each on its
    /// own: `--servers batched,batched --protocol predict,v2-binary`);
    /// default: each server's fastest (see the module docs).
    #[arg(long, value_enum, value_delimiter = ',')]
    protocol: Vec<Choice>,
    /// Every request valid: no tight deadlines, nothing malformed.
    #[arg(long)]
    valid_only: bool,
    /// The `serve` binary (default: beside this one).
    #[arg(long)]
    server: Option<PathBuf>,
    /// The python that runs the FastAPI server (default: the bootstrap's
    /// venv).
    #[arg(long)]
    python: Option<PathBuf>,
    /// The `mlserver` binary (default: scripts/bootstrap-mlserver.sh's
    /// venv in the user's cache).
    #[arg(long)]
    mlserver: Option<PathBuf>,
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
    /// After the rounds, measure the model's forward alone at each
    /// server's mean batch size and print the share of it each reached
    /// (TorchScript models; MLServer's batches are not read: its share is
    /// bounded by the forward alone at batch 1, `of_limit<=`).
    #[arg(long)]
    forward_limit: bool,
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
    if a.addr.is_none() && a.servers.contains(&ServerKind::Mlserver) && !a.valid_only {
        clap_error(
            "mlserver honours no x-deadline-ms and answers malformed requests its own way: \
             give --valid-only (every server of the run gets the same valid requests)",
        );
    }
    if a.protocol.len() > 1 && a.protocol.len() != a.servers.len() {
        clap_error("--protocol: give one for every server, or one per server of --servers");
    }
    a.model = a.models[0].clone();
    a
}

/// A `--protocol`: an encoding, or `auto` (the server's fastest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Choice {
    /// The server's fastest (see the module docs).
    Auto,
    /// The server's own JSON (`/predict`).
    Predict,
    /// The Open Inference Protocol, JSON tensors.
    V2Json,
    /// The Open Inference Protocol, binary tensor data.
    V2Binary,
}

impl Choice {
    fn forced(self) -> Option<Protocol> {
        match self {
            Self::Auto => None,
            Self::Predict => Some(Protocol::Predict),
            Self::V2Json => Some(Protocol::V2Json),
            Self::V2Binary => Some(Protocol::V2Binary),
        }
    }

    fn name(self) -> &'static str {
        self.forced().map_or("auto", Protocol::name)
    }
}

/// What `--protocol` says for the `k`-th server.
fn choice_for(args: &Args, k: usize) -> Choice {
    match args.protocol.as_slice() {
        [] => Choice::Auto,
        [one] => *one,
        many => many.get(k).copied().unwrap_or(Choice::Auto),
    }
}

fn clap_error(message: &str) -> ! {
    use clap::CommandFactory;
    Args::command()
        .error(clap::error::ErrorKind::ArgumentConflict, message)
        .exit()
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
    let batching = matches!(kind, Some(ServerKind::Batched | ServerKind::Mlserver));
    args.tolerance
        .unwrap_or(if args.reference.is_some() || batching {
            BATCHED_TOLERANCE
        } else {
            0.0
        })
}

/// The forward-alone limit of each server (`--forward-limit`): at its mean
/// batch size (1 for a server that does not batch), on as many threads as
/// it has workers, with no server running: the best of 5 measurements of
/// 0.4 s (a limit: the others' work on a shared machine only lowers it).
fn forward_limits(
    args: &Args,
    pool: &requests::Pool,
    kinds: &[Option<ServerKind>],
    summaries: &mut [report::Summary],
) -> Result<(), String> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    for (s, kind) in summaries.iter_mut().zip(kinds) {
        let (batch, workers) = match kind {
            None => continue,
            // Its batches are not read (MLServer 1.7.1's metrics give the
            // queue each request found, not the rows of each batch): the
            // forward alone at batch 1 bounds its share from above, as the
            // forward's rows/s only grows with the batch here.
            Some(ServerKind::Mlserver) => {
                s.of_limit_at_most = true;
                (1.0, args.workers.unwrap_or(2))
            }
            Some(ServerKind::Fastapi) => (1.0, args.workers.unwrap_or(2)),
            Some(k) => {
                let b = s.mean_batch.unwrap_or(1.0);
                let b = if *k == ServerKind::Batched { b } else { 1.0 };
                // The workers the server reported (`serve`'s /metrics),
                // else `--workers`, else one per core (serve-lab's default).
                (b, s.server_workers.or(args.workers).unwrap_or(cores))
            }
        };
        let rows = (batch.round() as usize).max(1);
        let mut rate = 0.0f64;
        for _ in 0..5 {
            let time = std::time::Duration::from_millis(400);
            rate = rate.max(limit::forward_alone(
                &args.model,
                rows,
                pool.features,
                workers,
                time,
            )?);
        }
        if !s.of_limit_at_most {
            s.mean_batch = Some(batch);
        }
        s.forward_limit_rps = Some(rate);
        s.of_limit = Some(s.counts.ok as f64 / s.seconds.max(1e-9) / rate);
    }
    Ok(())
}

/// Where a run against `kind` at `addr` sends its requests, and how.
async fn target(
    args: &Args,
    kind: Option<ServerKind>,
    forced: Option<Protocol>,
    addr: &str,
) -> Target {
    let protocol = match forced {
        Some(p) => p,
        None => servers::protocol(kind, addr).await,
    };
    let path = match protocol {
        Protocol::Predict => "/predict".to_string(),
        Protocol::V2Json | Protocol::V2Binary => {
            format!("/v2/models/{}/infer", servers::model_name(&args.model))
        }
    };
    Target {
        addr: addr.to_string(),
        protocol,
        path,
        valid_only: args.valid_only,
    }
}

/// One model: every server, every round.
fn run_model(args: &Args, label: Option<&str>) -> Result<bool, String> {
    let pool = Arc::new(requests::pool(&args.model, args.reference.as_deref())?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut results: Vec<(String, Option<ServerKind>, Acc)> = Vec::new();
    if let Some(addr) = &args.addr {
        let mut acc = Acc::default();
        let tolerance = tolerance_for(args, None);
        rt.block_on(async {
            let t = target(args, None, choice_for(args, 0).forced(), addr).await;
            report::one_run(&t, None, &pool, args, tolerance, true, &mut acc).await
        })?;
        results.push(("server".into(), None, acc));
    } else {
        let servers = &args.servers;
        // With one encoding a server, each line names its server's.
        let by_protocol = args.protocol.len() > 1;
        results = servers
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let name = if by_protocol {
                    format!("{} {}", k.name(), choice_for(args, i).name())
                } else {
                    k.name().into()
                };
                (name, Some(*k), Acc::default())
            })
            .collect();
        for round in 0..args.rounds {
            // ABBA: the order reverses every other round.
            let order: Vec<usize> = if round % 2 == 0 {
                (0..servers.len()).collect()
            } else {
                (0..servers.len()).rev().collect()
            };
            for k in order {
                let kind = servers[k];
                let server = servers::start(args, &pool, kind)?;
                let tolerance = tolerance_for(args, Some(kind));
                let acc = &mut results[k].2;
                rt.block_on(async {
                    let forced = choice_for(args, k).forced();
                    let t = target(args, Some(kind), forced, &server.addr).await;
                    let check = kind.is_serve();
                    report::one_run(&t, Some(&server), &pool, args, tolerance, check, acc).await
                })?;
                drop(server);
            }
        }
    }
    let mut summaries: Vec<_> = results
        .iter_mut()
        .map(|(n, _, a)| match label {
            Some(l) => a.summary(&format!("{n} {l}")),
            None => a.summary(n),
        })
        .collect();
    let kinds: Vec<_> = results.iter().map(|(_, k, _)| *k).collect();
    if args.forward_limit && !requests::is_package(&args.model) {
        forward_limits(args, &pool, &kinds, &mut summaries)?;
    }
    report::print(&summaries, &kinds, args, label)
}
