//! The forward-alone limit: rows/s of the model alone, in this process, at
//! the mean batch size a server formed (its `/metrics`: Triton's
//! inference and execution counts), on `workers` threads sharing one
//! copy of the model, each with one intra-op thread and in inference mode,
//! as a server's workers run it; and what a batching server formed, read
//! from its `/metrics`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tch::{CModule, Kind, Tensor};
use tch_scope::Inference;

use crate::client;

/// The batcher's counters on a tch-scope server's `/metrics`: requests
/// computed and forwards run (Triton's inference and execution counts),
/// summed over batchers (`None` without them).
pub async fn batch_counts(addr: &str) -> Option<(f64, f64)> {
    let (status, body) = client::get(addr, "/metrics").await.ok()?;
    if status != 200 {
        return None;
    }
    let text = String::from_utf8_lossy(&body);
    let sum = |name: &str| -> Option<f64> {
        let values: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    };
    // The library's names (`serve`), or the `metrics` facade's
    // (`serve-lab`, which exports the batcher's own).
    let pair = |inferences: &str, executions: &str| Some((sum(inferences)?, sum(executions)?));
    pair(
        "serve_batch_inferences_total",
        "serve_batch_executions_total",
    )
    .or_else(|| {
        pair(
            "tch_scope_batch_inferences_total",
            "tch_scope_batch_executions_total",
        )
    })
}

/// Rows/s of `model`'s forward alone on batches of `rows` rows of
/// `features` floats, on `workers` threads sharing one copy of the model
/// (as a server's batcher workers share its `Inference`), each with one
/// intra-op thread and in inference mode, for about `time`.
pub fn forward_alone(
    model: &Path,
    rows: usize,
    features: usize,
    workers: usize,
    time: Duration,
) -> Result<f64, String> {
    let cmodule = CModule::load(model).map_err(|e| e.to_string())?;
    // One copy, as the server holds it: a copy per thread would not fit
    // the cache a shared one does (16 MiB of weights for the load MLP, 32
    // MiB of L3 here), and measured a lower limit than the servers reach.
    let served = Arc::new(Inference::new(cmodule).map_err(|e| e.to_string())?);
    let threads: Vec<_> = (0..workers.max(1))
        .map(|_| {
            let served = Arc::clone(&served);
            std::thread::spawn(move || -> Result<(usize, Duration), String> {
                // Per thread, as each of serve's workers sets it (OpenMP
                // keeps the count a thread's own).
                tch::set_num_threads(1);
                let x = Tensor::ones(
                    [rows as i64, features as i64],
                    (Kind::Float, tch::Device::Cpu),
                );
                // As the servers' workers run it: inference mode.
                let forward = || served.run(|m| m.forward_ts(&[&x]).map(drop));
                // One forward of warm-up, not counted.
                forward().map_err(|e| e.to_string())?;
                let start = Instant::now();
                let mut done = 0;
                while start.elapsed() < time {
                    forward().map_err(|e| e.to_string())?;
                    done += rows;
                }
                Ok((done, start.elapsed()))
            })
        })
        .collect();
    let mut rate = 0.0;
    for t in threads {
        let (done, took) = t.join().map_err(|_| "a forward thread panicked")??;
        rate += done as f64 / took.as_secs_f64().max(1e-9);
    }
    Ok(rate)
}
