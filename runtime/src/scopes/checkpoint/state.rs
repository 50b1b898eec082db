//! The training state a checkpoint saves beside the weights: the
//! optimizer's state, the step reached, the generators' states and the
//! user's own state ([`RunState`]), as extra named tensors of the same
//! file, and how each is put back on `resume`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tch::{Device, Kind, Tensor};

use crate::optim::Optimizer;
use crate::scopes::rng;
use crate::sync::lock;

/// The file's names of the extra tensors (the metrics have theirs in
/// `super::PREFIX`).
pub(super) const STEP: &str = "__tch_scope_step__";
pub(super) const USER: &str = "__tch_scope_state__";
pub(super) const OPTIMIZER: &str = "__tch_scope_optimizer__.";
pub(super) const RNG: &str = "__tch_scope_rng__.";

/// A value of the run's own, saved in the checkpoint and put back on
/// `resume`: a data-order seed, the epoch, a learning-rate scheduler's
/// position — anything `serde` can serialize.
///
/// A cell (a mutex inside, every method `&self`), for the reason the
/// optimizers take `&self`: the checkpoint reads it at every step
/// boundary while the body changes it, so both hold a shared reference.
/// On `resume`, entering the checkpoint replaces its value with the saved
/// one (a file saved without a state leaves it as it was). It is
/// serialized at every step boundary: keep it small (a seed and a
/// position, not the data set).
///
/// ```
/// use tch_scope::{RunState, scoped, steps};
/// let vs = tch::nn::VarStore::new(tch::Device::Cpu);
/// let path = std::env::temp_dir().join(format!("doc-state-{}.ot", std::process::id()));
/// let seen = RunState::new(0u64);
/// scoped!(checkpoint(vs, &path, resume, state = seen) => {
///     for _ in steps(3) {
///         seen.update(|n| *n += 1);
///     }
/// });
/// let saved = tch_scope::Checkpoint::read(&path).unwrap();
/// assert_eq!(saved.step, 3);
/// assert_eq!(saved.state::<u64>().unwrap(), Some(3));
/// # std::fs::remove_file(&path).unwrap();
/// ```
#[derive(Debug, Default)]
pub struct RunState<T>(Arc<Mutex<T>>);

impl<T> RunState<T> {
    /// A cell holding `value` (a fresh run's state).
    pub fn new(value: T) -> Self {
        Self(Arc::new(Mutex::new(value)))
    }

    /// A copy of the value.
    ///
    /// ```no_run
    /// assert_eq!(tch_scope::RunState::new(4).get(), 4);
    /// ```
    pub fn get(&self) -> T
    where
        T: Clone,
    {
        lock(&self.0).clone()
    }

    /// Replaces the value.
    ///
    /// ```no_run
    /// let s = tch_scope::RunState::new(1);
    /// s.set(2);
    /// assert_eq!(s.get(), 2);
    /// ```
    pub fn set(&self, value: T) {
        *lock(&self.0) = value;
    }

    /// Changes the value in place and returns what `f` returns.
    ///
    /// ```no_run
    /// let s = tch_scope::RunState::new(vec![1]);
    /// assert_eq!(s.update(|v| { v.push(2); v.len() }), 2);
    /// ```
    pub fn update<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut lock(&self.0))
    }

    /// The value, the cell consumed (a copy while a checkpoint still
    /// shares the cell).
    pub fn into_inner(self) -> T
    where
        T: Clone,
    {
        match Arc::try_unwrap(self.0) {
            Ok(cell) => cell
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            Err(shared) => lock(&shared).clone(),
        }
    }
}

/// What the checkpoint needs of a [`RunState`], without its type.
pub(super) trait Persist: Send + Sync {
    fn to_json(&self) -> Result<String, String>;
    /// Replaces the value with `json`'s; with `commit` false, only checks
    /// that it would.
    fn load_json(&self, json: &str, commit: bool) -> Result<(), String>;
    /// A second handle to the same cell, for the checkpoint to keep.
    fn handle(&self) -> Arc<dyn Persist>;
}

impl<T: Serialize + DeserializeOwned + Send + 'static> Persist for RunState<T> {
    fn handle(&self) -> Arc<dyn Persist> {
        Arc::new(Self(Arc::clone(&self.0)))
    }

    fn to_json(&self) -> Result<String, String> {
        serde_json::to_string(&*lock(&self.0)).map_err(|e| format!("the run state: {e}"))
    }

    fn load_json(&self, json: &str, commit: bool) -> Result<(), String> {
        let value = serde_json::from_str(json)
            .map_err(|e| format!("the saved run state does not fit this run's type: {e}"))?;
        if commit {
            *lock(&self.0) = value;
        }
        Ok(())
    }
}

/// The training state beyond the weights, as the file holds it.
#[derive(Default)]
pub(super) struct Extras {
    pub step: Option<i64>,
    pub user: Option<String>,
    pub optimizer: Vec<(String, Tensor)>,
    /// `(-1 for the CPU, else the CUDA device, state)`.
    pub rng: Vec<(i32, Tensor)>,
}

/// Takes the entries of `named` that are extras out of it.
pub(super) fn split(named: &mut HashMap<String, Tensor>) -> Result<Extras, String> {
    let mut extras = Extras::default();
    let keys: Vec<String> = named
        .keys()
        .filter(|k| k.starts_with("__tch_scope_") && !k.starts_with(super::PREFIX))
        .cloned()
        .collect();
    for key in keys {
        let Some(t) = named.remove(&key) else {
            continue;
        };
        if key == STEP {
            let v = to_vec::<i64>(&t, Kind::Int64).map_err(|e| format!("the step: {e}"))?;
            extras.step = v.first().copied();
        } else if key == USER {
            let bytes = to_vec::<u8>(&t, Kind::Uint8).map_err(|e| format!("the run state: {e}"))?;
            extras.user = Some(
                String::from_utf8(bytes).map_err(|e| format!("the run state is not UTF-8: {e}"))?,
            );
        } else if let Some(name) = key.strip_prefix(OPTIMIZER) {
            extras.optimizer.push((name.to_owned(), t));
        } else if let Some(device) = key.strip_prefix(RNG) {
            let index = if device == "cpu" {
                -1
            } else {
                device
                    .strip_prefix("cuda:")
                    .and_then(|i| i.parse().ok())
                    .ok_or_else(|| format!("unknown generator `{device}` in the file"))?
            };
            let t = t.f_to(Device::Cpu).map_err(|e| e.to_string())?;
            extras.rng.push((index, t));
        }
    }
    extras.optimizer.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(extras)
}

fn to_vec<T: tch::kind::Element>(t: &Tensor, kind: Kind) -> Result<Vec<T>, String>
where
    for<'t> Vec<T>: TryFrom<&'t Tensor, Error = tch::TchError>,
{
    t.f_to_kind(kind)
        .and_then(|t| t.f_to(Device::Cpu))
        .and_then(|t| t.f_flatten(0, -1))
        .and_then(|t| Vec::<T>::try_from(&t))
        .map_err(|e| crate::durable::without_backtrace(&e.to_string()).to_owned())
}

/// The file's name of a generator's state.
pub(super) fn rng_name(device: i32) -> String {
    if device < 0 {
        format!("{RNG}cpu")
    } else {
        format!("{RNG}cuda:{device}")
    }
}

/// The extras of the live run, as named tensors for the file.
pub(super) fn capture(
    step: i64,
    optimizer: Option<&dyn Optimizer>,
    user: Option<&dyn Persist>,
) -> Result<Vec<(String, Tensor)>, String> {
    let mut out = vec![(
        STEP.to_owned(),
        Tensor::f_from_slice(&[step]).map_err(|e| e.to_string())?,
    )];
    if let Some(opt) = optimizer {
        out.extend(
            opt.state()
                .into_iter()
                .map(|(n, t)| (format!("{OPTIMIZER}{n}"), t)),
        );
    }
    out.extend(capture_rest(user)?);
    Ok(out)
}

/// The generators' states and the run state (what a boundary copies
/// beside the weights, the step and the optimizer).
pub(super) fn capture_rest(user: Option<&dyn Persist>) -> Result<Vec<(String, Tensor)>, String> {
    let mut out = Vec::new();
    for (device, t) in rng::generator_states()? {
        out.push((rng_name(device), t));
    }
    if let Some(user) = user {
        out.push((USER.to_owned(), json_tensor(&user.to_json()?)?));
    }
    Ok(out)
}

pub(super) fn json_tensor(json: &str) -> Result<Tensor, String> {
    Tensor::f_from_slice(json.as_bytes()).map_err(|e| e.to_string())
}

/// Puts the saved optimizer, generators and user state back: all of them
/// or, when one can't be (an optimizer state of another optimizer, a run
/// state of another type, a generator of a CUDA device not present),
/// none.
pub(super) fn restore(
    extras: &Extras,
    optimizer: Option<&dyn Optimizer>,
    user: Option<&dyn Persist>,
) -> Result<(), String> {
    let cuda = rng::cuda_devices();
    if let Some((device, _)) = extras.rng.iter().find(|(d, _)| *d >= cuda) {
        return Err(format!(
            "the file holds the generator of CUDA device {device}, and {cuda} \
             {} present",
            if cuda == 1 { "is" } else { "are" }
        ));
    }
    let user = user.zip(extras.user.as_deref());
    if let Some((user, json)) = user {
        user.load_json(json, false)?;
    }
    if let Some(opt) = optimizer {
        if extras.optimizer.is_empty() {
            return Err(format!(
                "the file holds no optimizer state, and this checkpoint names a {}: \
                 resuming would restart it cold (delete the file to start afresh)",
                opt.name()
            ));
        }
        // All or nothing (see `Optimizer::load_state`): the last check.
        opt.load_state(&extras.optimizer)
            .map_err(|e| e.to_string())?;
    }
    if let Some((user, json)) = user {
        user.load_json(json, true)?;
    }
    for (device, state) in &extras.rng {
        rng::set_generator_state(*device, state)?;
    }
    Ok(())
}
