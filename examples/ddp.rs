//! Data-parallel training over N local processes, as PyTorch's
//! DistributedDataParallel does it: every rank holds the same model, trains
//! on its own shard of the data, and averages gradients across ranks after
//! each backward pass, so the weights stay identical everywhere.
//!
//! `cargo run -p examples --example ddp -- [N]` starts N workers (default
//! 2; N must divide the 256 samples) by re-running itself with torchrun's
//! variables, checks that they end with identical weights, and that those
//! equal a single-process run on all the data. The workers also run under
//! torchrun itself: `torchrun --no-python --nproc-per-node=2
//! target/debug/examples/ddp` (with `RANK` set, a worker reads no
//! arguments).

use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Parser;
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_scope::{ScopeError, dist};

const SAMPLES: i64 = 256;
const STEPS: usize = 60;

/// Data-parallel training over N local processes (Gloo): checks that every
/// rank ends with the same weights, equal to a single-process run's.
#[derive(Debug, Parser)]
#[command(name = "ddp")]
struct Args {
    /// How many worker processes (ranks) to start; it must divide the 256
    /// samples.
    #[arg(value_name = "N", default_value = "2", value_parser = ranks)]
    n: usize,
}

/// N: at least 1, and a divisor of [`SAMPLES`] (each rank an equal shard).
fn ranks(v: &str) -> Result<usize, String> {
    let n: usize = v
        .parse()
        .map_err(|e: std::num::ParseIntError| e.to_string())?;
    if n >= 1 && (SAMPLES as usize).is_multiple_of(n) {
        Ok(n)
    } else {
        Err(format!("must be at least 1 and divide {SAMPLES}"))
    }
}

/// A worker's error: joining the group, or a collective.
#[derive(Debug)]
enum Error {
    Scope(ScopeError),
    Dist(dist::DistError),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Scope(e) => e.fmt(f),
            Error::Dist(e) => e.fmt(f),
        }
    }
}

impl From<ScopeError> for Error {
    fn from(e: ScopeError) -> Self {
        Error::Scope(e)
    }
}

impl From<dist::DistError> for Error {
    fn from(e: dist::DistError) -> Self {
        Error::Dist(e)
    }
}

/// Two blobs to tell apart, made the same way in every process.
fn dataset() -> (Tensor, Tensor) {
    let x: Vec<f32> = (0..SAMPLES * 2)
        .map(|i| ((i as f32) * 0.731).sin() * 2.0)
        .collect();
    let x = Tensor::from_slice(&x).reshape([SAMPLES, 2]);
    let y = (x.sum_dim_intlist(1, false, Kind::Float) + x.select(1, 0) * 0.5)
        .gt(0.0)
        .to_kind(Kind::Int64);
    (x, y)
}

/// Trains the same MLP (same seed, so the same initial weights) on `x, y`;
/// with a group, averages gradients across it before every step. Returns
/// the final parameters, flattened in name order.
fn train(x: &Tensor, y: &Tensor, group: Option<&dist::Group>) -> Result<Vec<f32>, Error> {
    tch::manual_seed(0);
    let vs = nn::VarStore::new(Device::Cpu);
    let model = nn::seq()
        .add(nn::linear(vs.root() / "l1", 2, 16, Default::default()))
        .add_fn(|t| t.relu())
        .add(nn::linear(vs.root() / "l2", 16, 2, Default::default()));
    let mut opt = nn::Sgd::default().build(&vs, 0.2).expect("optimizer");
    for _ in 0..STEPS {
        opt.zero_grad();
        model.forward(x).cross_entropy_for_logits(y).backward();
        if let Some(group) = group {
            group.average_gradients(&vs)?;
        }
        opt.step();
    }
    let mut vars: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    let flat = Tensor::cat(
        &vars
            .iter()
            .map(|(_, v)| v.reshape([-1]))
            .collect::<Vec<_>>(),
        0,
    );
    Ok(Vec::try_from(&flat).expect("f32 params"))
}

/// One rank: joins the group torchrun's variables describe, trains on its
/// shard, prints its parameters. The group is destroyed on return.
#[tch_scope::distributed(from_env, timeout = Duration::from_secs(60))]
fn worker() -> Result<(), Error> {
    let group = dist::current()?;
    let (x, y) = dataset();
    let shard = SAMPLES / group.world_size() as i64;
    let lo = group.rank() as i64 * shard;
    let params = train(
        &x.narrow(0, lo, shard),
        &y.narrow(0, lo, shard),
        Some(&group),
    )?;
    println!("PARAMS {params:?}");
    eprintln!("rank {} of {}: done", group.rank(), group.world_size());
    Ok(())
}

fn parse(stdout: &str) -> Vec<f32> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("PARAMS "))
        .expect("a worker printed no PARAMS");
    line.trim_matches(['[', ']'])
        .split(", ")
        .map(|v| v.parse().expect("a number"))
        .collect()
}

fn main() -> Result<(), Error> {
    if std::env::var_os("RANK").is_some() {
        return worker();
    }
    let Args { n } = Args::parse();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let exe = std::env::current_exe().expect("current_exe");
    let children: Vec<_> = (0..n)
        .map(|rank| {
            Command::new(&exe)
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("WORLD_SIZE", n.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a worker")
        })
        .collect();
    // Every child is waited for, even if an earlier one failed.
    let outputs: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().expect("wait for a worker"))
        .collect();
    for (rank, out) in outputs.iter().enumerate() {
        assert!(out.status.success(), "rank {rank} failed: {}", out.status);
    }
    let params: Vec<Vec<f32>> = outputs
        .iter()
        .map(|o| parse(&String::from_utf8_lossy(&o.stdout)))
        .collect();
    assert!(
        params.iter().all(|p| p == &params[0]),
        "ranks ended with different weights"
    );
    let (x, y) = dataset();
    let single = train(&x, &y, None)?;
    let diff = params[0]
        .iter()
        .zip(&single)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!(
        "{n} ranks trained {} parameters for {STEPS} steps: identical on every rank; \
         max |ddp - single process| = {diff:.2e}",
        single.len()
    );
    assert!(diff < 1e-4, "DDP drifted from the single-process run");
    Ok(())
}
