//! Functions a user's crate writes with tch-scope, imported as `ts`
//! (`ts = { package = "tch-scope", … }`), so every attribute names it with
//! `crate = "ts"`. Checked by `tests/scopes.rs` and run by `src/main.rs`;
//! a training run (`train`) and a server (`serving`), by `tests/train_serve.rs`.

use std::path::Path;

pub mod serving;
pub mod train;

use tch::{Device, Kind, Tensor};

/// `x @ w` without building a graph, behind `std::io::Result`.
///
/// # Errors
/// None of its own; the signature is the point (a foreign error type).
#[ts::no_grad(crate = "ts")]
pub fn predict(w: &Tensor, x: &Tensor) -> std::io::Result<Tensor> {
    Ok(x.matmul(w))
}

/// The size of the file at `path`, read under `no_grad`: a `?` on an
/// `io::Error` leaves the scope early.
///
/// # Errors
/// The `io::Error` of reading the file's metadata.
#[ts::no_grad(crate = "ts")]
pub fn file_len(path: &Path) -> std::io::Result<u64> {
    let meta = std::fs::metadata(path)?;
    Ok(meta.len())
}

/// Sums `values` under `no_grad`, refusing (with a `String`) to do so where
/// grad mode is on or an element is negative.
///
/// # Errors
/// `"grad mode is on"`, or the first negative element.
#[ts::no_grad(crate = "ts")]
pub fn checked_sum(values: &[f64]) -> Result<f64, String> {
    if ts::is_grad_enabled() {
        return Err("grad mode is on".to_owned());
    }
    if let Some(v) = values.iter().find(|v| **v < 0.0) {
        return Err(format!("negative element {v}"));
    }
    let t = Tensor::from_slice(values).set_requires_grad(true);
    let s = t.sum(Kind::Double);
    if s.requires_grad() {
        return Err("a graph was built".to_owned());
    }
    Ok(s.double_value(&[]))
}

/// One step, timed (as `downstream::timed_step`) and without a graph.
#[ts::scope(no_grad, timed, crate = "ts")]
pub fn timed_step(x: &Tensor) -> Tensor {
    std::thread::sleep(std::time::Duration::from_millis(1));
    x * 2
}

/// Runs on CUDA device 0. `String` cannot hold a `ScopeError`, so where
/// there is no such device the function panics with its message.
///
/// # Errors
/// Never of its own.
#[ts::device(0, crate = "ts")]
pub fn on_gpu() -> Result<u8, String> {
    Ok(u8::from(ts::current_cuda_device() == Some(0)))
}

/// Grad mode as seen after an `.await`, inside `no_grad`: a task that may
/// resume on another worker thread.
pub async fn grad_after_await(yields: u32) -> bool {
    inner(yields).await
}

#[ts::no_grad(crate = "ts")]
async fn inner(yields: u32) -> bool {
    for _ in 0..yields {
        tokio::task::yield_now().await;
    }
    let x = Tensor::ones([2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    ts::is_grad_enabled() || (&x * 3).requires_grad()
}

/// An inference handler as a service writes it: inference mode per poll,
/// timed across its awaits, under a deadline; `Send`, so it can be
/// `tokio::spawn`ed. Returns whether inference mode was on after each
/// suspension.
pub async fn handler(yields: u32) -> bool {
    scoped_handler(yields).await
}

#[ts::scope(
    inference_mode,
    timed("downstream::handler"),
    deadline(std::time::Duration::from_secs(30)),
    crate = "ts"
)]
async fn scoped_handler(yields: u32) -> bool {
    let mut on = true;
    for _ in 0..yields {
        tokio::task::yield_now().await;
        on &= ts::is_inference_mode_enabled();
    }
    std::thread::sleep(std::time::Duration::from_millis(2));
    tokio::task::yield_now().await;
    let x = Tensor::ones([2], (Kind::Float, Device::Cpu));
    on && ts::is_inference_mode_enabled() && (&x * 2).is_inference()
}

/// Whether grad mode is on: a task's view outside any scope.
pub async fn grad_outside() -> bool {
    tokio::task::yield_now().await;
    ts::is_grad_enabled()
}

/// The math attention backend only, with tuned cuDNN convolutions and
/// float32 matmuls at `"high"`: precision and kernel choice behind a
/// foreign error type (`cudnn` and `matmul_precision` can fail, and
/// `io::Error` cannot hold a `ScopeError`: a failure would panic).
///
/// # Errors
/// None of its own.
#[ts::scope(
    sdpa(math),
    cudnn(benchmark, allow_tf32 = false),
    matmul_precision("high"),
    crate = "ts"
)]
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor) -> std::io::Result<Tensor> {
    debug_assert_eq!(ts::sdpa_backends(), [ts::SdpaBackend::Math]);
    Ok(Tensor::scaled_dot_product_attention(
        q,
        k,
        v,
        None::<&Tensor>,
        0.0,
        false,
        None,
        false,
    ))
}

/// Draws under `seed(7)`, forking only the CPU generator.
#[ts::seed(7, devices = [], crate = "ts")]
pub fn seeded_draw() -> Tensor {
    Tensor::rand([3], (Kind::Float, Device::Cpu))
}

/// Draws under `seed(step)` for a step of any integer type, and under
/// `seed(-1)` (two's complement, as `torch.manual_seed(-1)`).
pub fn seeded_by_step(step: i64, index: usize, small: i32) -> [Tensor; 4] {
    let draw = || Tensor::rand([3], (Kind::Float, Device::Cpu));
    [
        ts::scoped!(seed(step, devices = []) => draw()),
        ts::scoped!(seed(index) => draw()),
        ts::scoped!(seed(small) => draw()),
        ts::scoped!(seed(-1) => draw()),
    ]
}

/// CPU work, timed (as `downstream::timed_work`), for a blocking task.
#[ts::timed(crate = "ts")]
#[must_use]
pub fn timed_work(n: u32) -> u32 {
    (0..=n).sum()
}
