//! Training memory: activation recomputation (`tch_scope::autograd::recompute`)
//! against the plain model, on an MLP of 32 layers of width 1024 at batch
//! 256 (Linear, ReLU, dropout 0.1), recomputed every 4 layers.
//!
//! Per variant, in exact tensor bytes (`tensor_memory`): what the forward
//! leaves held for backward (the activations, `retained`), and the peak of
//! the whole step (`step_peak`, weight gradients included); the step time
//! (forward + backward, the fastest of `STEPS`); and whether every gradient
//! is bitwise equal to the plain model's (same seed, dropout included).
//! `scripts/bench/python_recompute.py` does the same with
//! `torch.utils.checkpoint(use_reentrant=False)`. Prints one JSON line per
//! variant. Sizes: `RECOMPUTE_LAYERS`, `RECOMPUTE_WIDTH`, `RECOMPUTE_BATCH`,
//! `RECOMPUTE_EVERY`, `RECOMPUTE_STEPS`; under `cargo test --all-targets`
//! (no argument) it runs a tiny model as a smoke test.
//!
//! The `apply` overhead of a trivial custom function (one `mul`) beside a
//! plain `mul` is measured too (`apply_ns`, `mul_ns`), for
//! `torch.autograd.Function` in Python beside it.

use std::time::Instant;

use tch::{Device, Kind, Tensor};
use tch_scope::autograd::{Ctx, Function, recompute};
use tch_scope::{Scope, TensorMemory};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

type Params = Vec<(Tensor, Tensor)>;

fn params(layers: usize, width: i64) -> Params {
    tch::manual_seed(0);
    (0..layers)
        .map(|_| {
            let w = (Tensor::randn([width, width], (Kind::Float, Device::Cpu))
                / (width as f64).sqrt())
            .set_requires_grad(true);
            let b = Tensor::zeros([width], (Kind::Float, Device::Cpu)).set_requires_grad(true);
            (w, b)
        })
        .collect()
}

fn layers(x: &Tensor, ps: &[(Tensor, Tensor)]) -> Tensor {
    let mut h = x.shallow_clone();
    for (w, b) in ps {
        h = h.linear(w, Some(b)).relu().dropout(0.1, true);
    }
    h
}

fn forward(x: &Tensor, ps: &Params, every: usize) -> Tensor {
    if every == 0 {
        return layers(x, ps);
    }
    let mut h = x.shallow_clone();
    for chunk in ps.chunks(every) {
        let seg: Params = chunk
            .iter()
            .map(|(w, b)| (w.shallow_clone(), b.shallow_clone()))
            .collect();
        h = recompute(&[&h], move |xs| vec![layers(xs[0], &seg)]).remove(0);
    }
    h
}

struct Step {
    retained: i64,
    step_peak: u64,
    nanos: u128,
    grads: Vec<Tensor>,
}

/// One training step; with `measure`, inside `tensor_memory` scopes (which
/// report every allocation: the time is taken without them).
fn step(x: &Tensor, ps: &Params, every: usize, measure: bool) -> Step {
    for (w, b) in ps {
        for t in [w, b] {
            let mut g = t.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
    }
    tch::manual_seed(7);
    let t = Instant::now();
    let whole = measure.then(|| TensorMemory::new("recompute::step").enter().unwrap());
    let fwd = measure.then(|| TensorMemory::new("recompute::forward").enter().unwrap());
    let loss = forward(x, ps, every).square().mean(Kind::Float);
    let retained = fwd.and_then(|g| g.finish()).map_or(0, |r| r.delta());
    loss.backward();
    drop(loss);
    let step_peak = whole
        .and_then(|g| g.finish())
        .map_or(0, |r| r.peak_growth());
    let nanos = t.elapsed().as_nanos();
    let grads = ps
        .iter()
        .flat_map(|(w, b)| [w.grad().copy(), b.grad().copy()])
        .collect();
    Step {
        retained,
        step_peak,
        nanos,
        grads,
    }
}

/// `MulConstant(c)`: the trivial custom function.
struct MulConstant(f64);

impl Function for MulConstant {
    fn forward(&self, _: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        vec![inputs[0] * self.0]
    }

    fn backward(&self, _: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        vec![Some(&grads[0] * self.0)]
    }
}

/// Nanoseconds per call of `f`, the fastest of 5 rounds of `n`.
fn per_call(n: u32, mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(n)
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let smoke = std::env::args().nth(1).is_none_or(|a| a.starts_with('-'));
    let (l, w, b, every, steps) = if smoke {
        (4, 16, 4, 2, 1)
    } else {
        (
            env("RECOMPUTE_LAYERS", 32),
            env("RECOMPUTE_WIDTH", 1024),
            env("RECOMPUTE_BATCH", 256),
            env("RECOMPUTE_EVERY", 4),
            env("RECOMPUTE_STEPS", 3),
        )
    };
    let ps = params(l, w as i64);
    let x = Tensor::randn([b as i64, w as i64], (Kind::Float, Device::Cpu));
    // Interleaved, the fastest of each: load elsewhere lands on both.
    let mut best: [Option<Step>; 2] = [None, None];
    for e in [0, every] {
        let _ = step(&x, &ps, e, false); // warm-up
    }
    for _ in 0..steps {
        for (i, e) in [0, every].into_iter().enumerate() {
            let s = step(&x, &ps, e, false);
            if best[i].as_ref().is_none_or(|o| s.nanos < o.nanos) {
                best[i] = Some(s);
            }
        }
    }
    let [Some(mut plain), Some(mut rec)] = best else {
        unreachable!("at least one step each")
    };
    for (s, e) in [(&mut plain, 0), (&mut rec, every)] {
        let m = step(&x, &ps, e, true);
        (s.retained, s.step_peak) = (m.retained, m.step_peak);
    }
    let bitwise = plain.grads.iter().zip(&rec.grads).all(|(a, b)| a.equal(b));
    let y = Tensor::randn([1000], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let calls = if smoke { 10 } else { 20_000 };
    let apply_ns = per_call(calls, || {
        let _ = MulConstant(2.5).apply(&[&y]);
    });
    let mul_ns = per_call(calls, || {
        let _ = &y * 2.5;
    });
    for (variant, s) in [("plain", &plain), ("recompute", &rec)] {
        println!(
            "{{\"lang\":\"rust\",\"variant\":\"{variant}\",\"layers\":{l},\"width\":{w},\"batch\":{b},\"every\":{every},\"retained\":{},\"step_peak\":{},\"step_ms\":{:.1},\"bitwise\":{bitwise},\"apply_ns\":{apply_ns:.0},\"mul_ns\":{mul_ns:.0}}}",
            s.retained,
            s.step_peak,
            s.nanos as f64 / 1e6
        );
    }
}
