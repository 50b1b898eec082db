//! TorchScript (`tch::CModule`) against AOTInductor `.pt2`
//! (`tch_scope::aoti::Package`) on the same models: forward
//! latency at batch 1 and 32 on one thread, and throughput with 1 and 2
//! worker threads sharing one `Inference` handle. scripts/bench/aoti.sh
//! exports the models, runs this and Python's own runner, and prints the
//! table:
//!
//! ```text
//! bash scripts/bench/aoti.sh
//! cargo bench -p examples --bench aoti -- DIR   # DIR from scripts/bench/aoti.py export
//! ```
//!
//! Prints one JSON line per case. Every run is inside `Inference::run`
//! (eval mode held, `inference_mode`), as the example server runs its
//! model; each thread at one intra-op thread. Without DIR (as under
//! `cargo test --all-targets`) it says so and does nothing. The flags that
//! `cargo bench` and `cargo test` hand every bench target (`--bench`,
//! `--nocapture`, …: the ones criterion accepts) are accepted and ignored;
//! `cargo bench -p examples --bench aoti -- --help` lists the rest.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::Parser;
use tch::{CModule, Kind, Tensor};
use tch_scope::aoti::Package;
use tch_scope::{Inference, Servable};

const BATCHES: [i64; 2] = [1, 32];

/// TorchScript against AOTInductor `.pt2` on the same models: one JSON line
/// per case on stdout (scripts/bench/aoti.sh runs it).
#[derive(Debug, Parser)]
#[command(name = "aoti", bin_name = "aoti")]
struct Args {
    /// The models `scripts/bench/aoti.py export DIR` wrote (mlp.pt,
    /// mlp_b1.pt2, …); without it the bench does nothing.
    #[arg(value_name = "DIR")]
    dir: Option<PathBuf>,
    #[command(flatten)]
    _harness: Harness,
}

/// What `cargo bench` (`--bench`) and `cargo test` pass on to a
/// `harness = false` target; ignored, as criterion ignores them.
#[derive(Debug, clap::Args)]
struct Harness {
    #[arg(long, hide = true)]
    bench: bool,
    #[arg(long, hide = true)]
    test: bool,
    #[arg(long, hide = true)]
    nocapture: bool,
    #[arg(long, hide = true)]
    show_output: bool,
    #[arg(long, hide = true)]
    include_ignored: bool,
    #[arg(long, hide = true)]
    ignored: bool,
    #[arg(long, hide = true)]
    exact: bool,
    #[arg(long, hide = true)]
    list: bool,
}

trait Forward: Servable + Send + Sync + 'static {
    fn forward1(&self, x: &Tensor) -> Tensor;
}

impl Forward for CModule {
    fn forward1(&self, x: &Tensor) -> Tensor {
        self.forward_ts(&[x]).expect("forward")
    }
}

impl Forward for Package {
    fn forward1(&self, x: &Tensor) -> Tensor {
        self.run(&[x]).expect("run").remove(0)
    }
}

fn env_secs(name: &str, default: f64) -> Duration {
    Duration::from_secs_f64(
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

/// Median and mean over batches of calls of the per-call mean, after a
/// warm-up (as scripts/bench/aoti.py times Python's runner).
fn latency(f: &mut dyn FnMut(), budget: Duration) -> (f64, f64) {
    for _ in 0..20 {
        f();
    }
    let mut per = Vec::new();
    let mut n = 1u32;
    let start = Instant::now();
    while start.elapsed() < budget {
        let t = Instant::now();
        for _ in 0..n {
            f();
        }
        let dt = t.elapsed().as_secs_f64() / f64::from(n);
        per.push(dt);
        if dt * f64::from(n) < 0.01 {
            n *= 2;
        }
    }
    per.sort_by(f64::total_cmp);
    let mean = per.iter().sum::<f64>() / per.len() as f64;
    (per[per.len() / 2], mean)
}

/// Runs per second with `workers` threads calling the model for `budget`.
fn throughput<M: Forward>(
    served: &Arc<Inference<M>>,
    x: &Tensor,
    workers: usize,
    budget: Duration,
) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicU64::new(0));
    // Every worker warmed up before the clock starts.
    let ready = Arc::new(Barrier::new(workers + 1));
    let threads: Vec<_> = (0..workers)
        .map(|_| {
            let (served, stop, runs, ready) = (
                Arc::clone(served),
                Arc::clone(&stop),
                Arc::clone(&runs),
                Arc::clone(&ready),
            );
            let x = x.copy();
            std::thread::spawn(move || {
                // OpenMP's count is per thread.
                tch::set_num_threads(1);
                for _ in 0..20 {
                    served.run(|m| drop(m.forward1(&x)));
                }
                ready.wait();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    served.run(|m| drop(m.forward1(&x)));
                    n += 1;
                }
                runs.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    ready.wait();
    let before = Instant::now();
    std::thread::sleep(budget);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("worker");
    }
    // Each worker finishes the run it is in: counted, and so is its time.
    runs.load(Ordering::Relaxed) as f64 / before.elapsed().as_secs_f64()
}

/// One model in one format at one batch size.
fn bench<M: Forward>(model: &str, format: &str, m: M, shape: &[i64], b: i64) {
    let served = Arc::new(Inference::new(m).expect("serve"));
    let lat = env_secs("AOTI_BENCH_LATENCY_S", 1.0);
    let tput = env_secs("AOTI_BENCH_THROUGHPUT_S", 1.5);
    {
        let mut dims = vec![b];
        dims.extend_from_slice(shape);
        tch::manual_seed(7);
        let x = Tensor::randn(dims.as_slice(), (Kind::Float, tch::Device::Cpu));
        let (median, mean) = latency(&mut || served.run(|m| drop(m.forward1(&x))), lat);
        println!(
            "{{\"model\":\"{model}\",\"format\":\"{format}\",\"runner\":\"rust tch-scope\",\"batch\":{b},\"median_us\":{:.2},\"mean_us\":{:.2}}}",
            median * 1e6,
            mean * 1e6
        );
        for workers in [1, 2] {
            let rps = throughput(&served, &x, workers, tput);
            println!(
                "{{\"model\":\"{model}\",\"format\":\"{format}\",\"batch\":{b},\"workers\":{workers},\"runs_per_s\":{rps:.1}}}"
            );
        }
    }
}

fn main() {
    let Some(dir) = Args::parse().dir else {
        eprintln!(
            "aoti bench: no model directory given (scripts/bench/aoti.sh gives one): nothing to do"
        );
        return;
    };
    tch::set_num_threads(1);
    for (model, shape) in [("mlp", &[32][..]), ("conv", &[3, 32, 32][..])] {
        for b in BATCHES {
            let ts =
                CModule::load(dir.join(format!("{model}.pt"))).expect("load the TorchScript model");
            bench(model, "torchscript", ts, shape, b);
            // A package per batch size (exported for that shape).
            let pkg = Package::options()
                .runners(2)
                .load(dir.join(format!("{model}_b{b}.pt2")))
                .expect("load the package");
            bench(model, "pt2", pkg, shape, b);
        }
    }
}
