//! An HTTP inference server: a TorchScript file or an AOTInductor `.pt2`
//! package served by the serving library ([`tch_scope::serve`]) over the
//! Open Inference Protocol (`/v2/…`, JSON and binary tensors) and plain
//! JSON (`POST /predict`), batched, with `/metrics`, `/healthz` and
//! `/readyz`. What it serves and how: docs/serving.md.
//!
//! ```text
//! cargo run --release -p examples --example serve -- --model mlp.pt \
//!     --input-shape=-1,64 [--addr 127.0.0.1:8080] [--max-batch 32] …
//! ```
//!
//! `--help` lists every flag with its default; a bad flag or value is a
//! usage error (exit status 2). `--max-batch 1` never batches (each forward
//! one request). SIGTERM or SIGINT finishes the requests in flight and
//! exits 0 within `--shutdown-timeout-s` (1 when it had to cut requests
//! off); a second signal exits at once (130 or 143). A model that cannot
//! be loaded or warmed up on `--input-shape` exits 1 before it listens,
//! saying why.
//!
//! The program is `serve`'s lines; the rest is its flags.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use clap::builder::RangedU64ValueParser;
use tch_scope::ScopeError;
use tch_scope::batch::BatchOptions;
use tch_scope::serve::{Engine, Server, model_name, oip::Datatype};

#[tokio::main]
async fn main() -> ExitCode {
    match serve(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("serve: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), ScopeError> {
    let batching = BatchOptions::new()
        .max_batch(args.max_batch)
        .max_delay(Duration::from_millis(args.max_delay_ms))
        .workers(args.workers)
        .intra_op_threads(args.intra_op_threads)
        .max_queue(args.queue);
    let engine = Engine::load(&args.model, batching)?;
    let name = args.name.unwrap_or_else(|| model_name(&args.model));
    let mut server = Server::new(name, engine)
        .max_connections(args.max_connections)
        .header_timeout(args.header_timeout)
        .idle_timeout(args.idle_timeout)
        .body_timeout(args.body_timeout)
        .write_timeout(args.write_timeout)
        .body_limit(args.body_limit)
        .default_deadline(Duration::from_millis(args.deadline_ms))
        .shutdown_timeout(args.shutdown_timeout);
    if let Some(shape) = &args.input_shape {
        server = server.input(args.input_dtype, shape);
    }
    let listening = server.bind(args.addr).await?;
    // Tests and `load` read the port bound (`--addr …:0`) from this line.
    println!("listening on http://{}", listening.local_addr());
    listening.serve().await
}

/// The server's flags.
#[derive(Parser, Debug)]
#[command(
    about = "Serve a TorchScript or .pt2 model over the Open Inference Protocol and JSON, batched",
    allow_negative_numbers = true
)]
struct Args {
    /// The model: a TorchScript file, or an AOTInductor package when the
    /// path ends in `.pt2`.
    #[arg(long, value_name = "PATH")]
    model: PathBuf,
    /// The address to listen on (port 0: any free port; the first line on
    /// stdout names the one bound).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// The model's name in the routes (`/v2/models/NAME`) [default: the
    /// model file's stem].
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// The model's input: comma-separated dims, `-1` for the batch (e.g.
    /// `-1,64`). Needed for a TorchScript file, which declares none; a
    /// `.pt2` declares its own.
    #[arg(
        long,
        value_name = "DIMS",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    input_shape: Option<Vec<i64>>,
    /// The input's datatype (`FP32`, `FP64`, `INT64`, `INT32`, `BOOL`, …).
    #[arg(long, value_name = "DATATYPE", default_value = "FP32")]
    input_dtype: Datatype,
    /// The most requests a forward, 1 to 4096 (1: no batching).
    #[arg(long, value_name = "N", default_value = "32",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=4096))]
    max_batch: usize,
    /// How long a batch may wait for more requests when the workers are
    /// busy, in milliseconds, at most 10000.
    #[arg(long, value_name = "MS", default_value = "2",
          value_parser = clap::value_parser!(u64).range(..=10_000))]
    max_delay_ms: u64,
    /// Worker threads that run the model [default: half the cores, at
    /// least 1].
    ///
    /// Half: the HTTP runtime's threads need cores too. Measured
    /// on 2 cores (docs/serving.md, `make load`): 1 worker formed batches
    /// of about 27 rows against 13 with 2, for about 20 % less CPU a
    /// request, the same or more requests/s and a lower p99.
    #[arg(long, value_name = "N", default_value_t = (cores() / 2).max(1), hide_default_value = true,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..=1024))]
    workers: usize,
    /// libtorch's intra-op threads for each worker's forwards (0:
    /// libtorch's own count, one per core).
    #[arg(long, value_name = "N", default_value = "1",
          value_parser = RangedU64ValueParser::<usize>::new().range(0..=1024))]
    intra_op_threads: usize,
    /// The most requests waiting for a worker; one more is answered 503.
    #[arg(long, value_name = "N", default_value = "1024",
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    queue: usize,
    /// A request's budget from its arrival when it gives none (the
    /// `timeout` parameter or the `x-deadline-ms` header).
    #[arg(long, value_name = "MS", default_value = "10000",
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    deadline_ms: u64,
    /// The largest request body, in bytes.
    #[arg(long, value_name = "BYTES", default_value = "67108864")]
    body_limit: usize,
    /// Connections served at once; the rest wait in the kernel's backlog.
    #[arg(long, value_name = "N", default_value = "1024",
          value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    max_connections: u32,
    /// Seconds from a request head's first byte to its last.
    #[arg(long = "header-timeout-s", value_name = "S", default_value = "10", value_parser = seconds)]
    header_timeout: Duration,
    /// Seconds a connection may wait with no request before it is closed.
    #[arg(long = "idle-timeout-s", value_name = "S", default_value = "60", value_parser = seconds)]
    idle_timeout: Duration,
    /// Seconds a request body may take to arrive.
    #[arg(long = "body-timeout-s", value_name = "S", default_value = "30", value_parser = seconds)]
    body_timeout: Duration,
    /// Seconds an answer's write may make no progress (a client that does
    /// not read) before its connection is closed.
    #[arg(long = "write-timeout-s", value_name = "S", default_value = "30", value_parser = seconds)]
    write_timeout: Duration,
    /// Seconds SIGTERM or SIGINT gives the requests in flight.
    #[arg(long = "shutdown-timeout-s", value_name = "S", default_value = "30", value_parser = seconds)]
    shutdown_timeout: Duration,
}

/// This machine's cores (1 where they cannot be read).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Seconds, fractions allowed: more than 0, at most a day.
fn seconds(v: &str) -> Result<Duration, String> {
    match v.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err("expected seconds, more than 0 and at most 86400".into()),
    }
}
