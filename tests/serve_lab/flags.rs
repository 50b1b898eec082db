//! The flags (clap): every one checked at parse time, a bad value a usage
//! error (exit status 2).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use clap::builder::{RangedU64ValueParser, TypedValueParser};
use tch_scope::serve::connections::Limits;
use tch_scope::serve::oip::Datatype;

/// The model `scripts/export_models.py` exports with the bootstrap's
/// PyTorch: [n, 32] -> [n, 8], BatchNorm and Dropout, saved in training mode.
const DEFAULT_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/serve_mlp.pt");

/// The longest budget a request may ask for (a day).
pub(crate) const MAX_BUDGET_MS: u64 = 86_400_000;

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
pub(crate) struct Args {
    /// The address to listen on (port 0: any free port; the first line on
    /// stdout names the one bound).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080")]
    pub(crate) addr: SocketAddr,
    /// The model: a TorchScript file, or an AOTInductor package when the
    /// path ends in `.pt2` [default: the repository's
    /// tests/data/serve_mlp.pt, [n, 32] -> [n, 8]].
    #[arg(long, value_name = "PATH", default_value = DEFAULT_MODEL, hide_default_value = true)]
    pub(crate) model: PathBuf,
    /// Worker threads that run the model [default: one per core].
    #[arg(
        long,
        value_name = "N",
        default_value_t = cores(),
        hide_default_value = true,
        value_parser = at_least_one::<usize>
    )]
    pub(crate) workers: usize,
    /// The most requests waiting for a worker; one more is answered 503.
    #[arg(
        long,
        value_name = "N",
        default_value = "64",
        value_parser = at_least_one::<usize>
    )]
    pub(crate) queue: usize,
    /// Serve with plain tch (`no_grad`, eval set once, the deadline checked
    /// by hand) instead of tch-scope's scopes; never batches.
    #[arg(long)]
    pub(crate) plain: bool,
    /// The largest request body, in bytes (a larger one: 400).
    #[arg(long, value_name = "BYTES", default_value = "1048576")]
    pub(crate) body_limit: usize,
    /// A request's budget from its arrival when it sends no `x-deadline-ms`
    /// header (more than a day counts as a day).
    #[arg(
        long = "deadline-ms",
        value_name = "MS",
        default_value = "10000",
        value_parser = clap::value_parser!(u64)
            .map(|ms| Duration::from_millis(ms.min(MAX_BUDGET_MS)))
    )]
    pub(crate) default_deadline: Duration,
    /// libtorch's intra-op threads for each worker.
    #[arg(
        long,
        value_name = "N",
        default_value = "1",
        value_parser = at_least_one::<i32>
    )]
    pub(crate) intra_op_threads: i32,
    /// Add the /debug routes (`/debug/workers`, `/debug/pause`,
    /// `/debug/resume`), the `x-debug-fault` and `x-debug-grad` request
    /// headers and the batched server's `x-debug-batch` answer headers, for
    /// tests.
    #[arg(long)]
    pub(crate) debug: bool,
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
    pub(crate) body_timeout: Duration,
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
    pub(crate) max_connections: u32,
    /// Seconds that SIGTERM or SIGINT gives the requests in flight before
    /// the server exits (fractions allowed; more than 0, at most 86400).
    #[arg(long = "shutdown-timeout-s", value_name = "S", default_value = "10", value_parser = seconds)]
    pub(crate) shutdown_timeout: Duration,
    /// Seconds a worker may spend starting or on one job before /healthz
    /// calls it stuck and answers 503 (fractions allowed; more than 0, at
    /// most 86400).
    #[arg(long = "stuck-after-s", value_name = "S", default_value = "60", value_parser = seconds)]
    pub(crate) stuck_after: Duration,
    /// The input each worker runs once at its start (zeros) before
    /// /readyz says ready: comma-separated dims (each 0 to 2^20, at most
    /// 2^24 values), or `none` for no warm-up.
    // Fully qualified: clap reads a plain `Option<Vec<_>>` as a flag
    // given any number of times.
    #[arg(long, value_name = "DIMS|none", default_value = "1,32", value_parser = shape)]
    pub(crate) warmup_shape: ::std::option::Option<::std::vec::Vec<i64>>,
    /// The tch-scope server's most requests a forward, 1 to 4096 (1: no
    /// batching, the worker pool as without a batcher). `--plain` never
    /// batches.
    #[arg(
        long,
        value_name = "N",
        default_value = "32",
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=4096)
    )]
    pub(crate) max_batch: usize,
    /// How long a batch may wait for more requests when the workers are
    /// loaded, in milliseconds, at most 10000 (see `tch_scope::batch`).
    #[arg(
        long = "max-delay-ms",
        value_name = "MS",
        default_value = "2",
        value_parser = clap::value_parser!(u64).range(..=10_000).map(Duration::from_millis)
    )]
    pub(crate) max_delay: Duration,
    /// The model's name in the Open Inference Protocol's routes
    /// (`/v2/models/NAME`) [default: the model file's stem]. The `/v2`
    /// routes come with the batched tch-scope server (not with
    /// `--max-batch 1` or `--plain`), for a `.pt2` or with `--input-shape`.
    #[arg(long, value_name = "NAME")]
    pub(crate) name: Option<String>,
    /// The model's input for the `/v2` routes' metadata and checks:
    /// comma-separated dims, `-1` for the batch (e.g. `-1,32`); a
    /// TorchScript file declares none (a `.pt2` declares its own).
    #[arg(long, value_name = "DIMS", value_parser = input_shape, allow_hyphen_values = true)]
    pub(crate) input_shape: Option<InputShape>,
    /// The input's datatype for the `/v2` routes (`FP32`, `FP64`, `INT64`,
    /// …).
    #[arg(long, value_name = "DATATYPE", default_value = "FP32", value_parser = input_dtype)]
    pub(crate) input_dtype: Datatype,
}

impl Args {
    /// The tch-scope server batches unless `--max-batch 1`; `--plain`
    /// never does.
    pub(crate) fn batching(&self) -> bool {
        !self.plain && self.max_batch > 1
    }

    /// Whether `--model` names an AOTInductor package (`.pt2`, any case)
    /// rather than a TorchScript file.
    pub(crate) fn model_is_package(&self) -> bool {
        self.model
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("pt2"))
    }

    /// The connections' clocks.
    pub(crate) fn limits(&self) -> Limits {
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

/// `--input-shape`'s dims.
#[derive(Debug, Clone)]
pub(crate) struct InputShape(pub(crate) Vec<i64>);

/// `--input-shape`: comma-separated dims, each at least 1 or `-1` (any
/// size: the batch).
fn input_shape(v: &str) -> Result<InputShape, String> {
    v.split(',')
        .map(|d| match d.trim().parse::<i64>() {
            Ok(n) if n == -1 || n >= 1 => Ok(n),
            _ => Err(format!("{d:?} is not a dim (a size of at least 1, or -1)")),
        })
        .collect::<Result<_, _>>()
        .map(InputShape)
}

/// `--input-dtype`: a datatype of the protocol (`FP32`, `INT64`, …).
fn input_dtype(v: &str) -> Result<Datatype, String> {
    v.parse()
        .map_err(|e: tch_scope::serve::oip::OipError| e.message().to_owned())
}
