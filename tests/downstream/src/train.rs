//! A training run as a user's crate writes it: `ts::optim::Adam`, a
//! `checkpoint` that resumes with the optimizer's state, and `ts::steps`.

use std::path::Path;

use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

/// Trains a small linear model to step `until` (resuming from `path` when
/// it holds a run), saving every 2 steps; the weights, flattened.
///
/// # Errors
/// A `ScopeError` from the optimizer or the checkpoint.
pub fn train(path: &Path, until: i64) -> Result<Vec<f32>, ts::ScopeError> {
    tch::manual_seed(11);
    let vs = nn::VarStore::new(Device::Cpu);
    let net = nn::linear(vs.root() / "fc", 3, 1, nn::LinearConfig::default());
    let opt = ts::optim::Adam::new(&vs, 0.05)?;
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, -1.0, 0.5, 2.0]).reshape([2, 3]);
    let y = Tensor::from_slice(&[1.0f32, -1.0]).reshape([2, 1]);
    ts::try_scoped!(checkpoint(vs, path, resume, optimizer = opt, every = 2) => {
        for _ in ts::steps(until) {
            let loss = (net.forward(&x) - &y).square().mean(Kind::Float);
            opt.backward_step(&loss)?;
        }
        Ok::<(), ts::ScopeError>(())
    })??;
    let mut named: Vec<_> = vs.variables().into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let mut weights = Vec::new();
    for (_, t) in named {
        weights.extend(
            Vec::<f32>::try_from(t.detach().flatten(0, -1)).map_err(|e| {
                ts::ScopeError::new("train", None, format!("cannot read the weights: {e}"))
            })?,
        );
    }
    Ok(weights)
}
