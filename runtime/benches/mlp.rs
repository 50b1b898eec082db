//! A real inference workload: forward passes of a deep MLP on the CPU with
//! grad tracking, under `no_grad` and under `inference_mode`.
//!
//! Beside the time and the process's memory (RSS), one more forward under
//! `tensor_memory` gives its activation memory exactly: the peak of the
//! tensor bytes it held live and the bytes it allocated in all.
//!
//! One variant per process (`cargo bench --bench mlp -- no_grad`), so each
//! peak RSS is its own; scripts/bench/run.sh runs the three and
//! scripts/bench/python_mlp.py does the same in PyTorch Python. Prints one
//! JSON line. Without a variant (as under `cargo test --all-targets`) it
//! runs all three on a tiny model as a smoke test.

use std::time::Instant;

use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};
use tch_scope::{last_memory_report, scoped};

const VARIANTS: [&str; 4] = ["grad", "no_grad", "inference_mode", "deadline"];

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// VmRSS and VmHWM of this process, in KiB.
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn forward(variant: &str, model: &impl Module, x: &Tensor) -> Tensor {
    // The output is dropped by the caller; with grad tracking the graph
    // (and every saved activation) lives until then, as in Python.
    match variant {
        "grad" => model.forward(x),
        "no_grad" => scoped!(no_grad => model.forward(x)),
        "inference_mode" => scoped!(inference_mode => model.forward(x)),
        // Grad tracking with every operator checked against a deadline
        // that never comes: the check's cost, to compare with "grad".
        "deadline" => scoped!(deadline(std::time::Duration::from_secs(3600)) => model.forward(x)),
        other => panic!("unknown variant {other}"),
    }
}

fn run(variant: &str, layers: usize, width: usize, batch: usize, iters: usize) -> String {
    tch::manual_seed(0);
    let vs = nn::VarStore::new(Device::Cpu);
    let mut model = nn::seq();
    for i in 0..layers {
        let layer = nn::linear(
            vs.root() / i,
            width as i64,
            width as i64,
            Default::default(),
        );
        model = model.add(layer).add_fn(|x| x.relu());
    }
    let x = Tensor::randn([batch as i64, width as i64], (Kind::Float, Device::Cpu));
    let (rss_before, _) = rss_kib();

    // One warm-up pass, then `iters` timed ones.
    drop(forward(variant, &model, &x));
    let mut ms: Vec<f64> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            let y = forward(variant, &model, &x);
            let _ = y.sum(Kind::Float).double_value(&[]);
            let elapsed = t.elapsed().as_secs_f64() * 1e3;
            drop(y);
            elapsed
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    let (_, hwm) = rss_kib();
    // After the RSS reading, so it stays what the timed passes used. The
    // output is dropped inside: with grad tracking, the graph's saved
    // activations are freed with it, as above.
    scoped!(tensor_memory("mlp::forward") => drop(forward(variant, &model, &x)));
    let act = last_memory_report().expect("tensor_memory reports");
    format!(
        "{{\"lang\":\"rust\",\"variant\":\"{variant}\",\"layers\":{layers},\"width\":{width},\
         \"batch\":{batch},\"iters\":{iters},\"threads\":{},\"ms_median\":{:.3},\"ms_min\":{:.3},\
         \"rss_before_kib\":{rss_before},\"hwm_kib\":{hwm},\"act_peak_bytes\":{},\
         \"act_allocated_bytes\":{}}}",
        tch::get_num_threads(),
        ms[ms.len() / 2],
        ms[0],
        act.peak_growth(),
        act.allocated.unwrap_or(0),
    )
}

fn main() {
    let variant = std::env::args().find(|a| VARIANTS.contains(&a.as_str()));
    match variant {
        Some(v) => println!(
            "{}",
            run(
                &v,
                env("MLP_LAYERS", 24),
                env("MLP_WIDTH", 2048),
                env("MLP_BATCH", 256),
                env("MLP_ITERS", 5),
            )
        ),
        None => {
            for v in VARIANTS {
                println!("{}", run(v, 2, 16, 4, 1));
            }
        }
    }
}
