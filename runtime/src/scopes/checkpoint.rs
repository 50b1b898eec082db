//! `checkpoint(vs, "path")`: save a `tch::nn::VarStore` when the scope ends
//! — normally, through `?`/`return`, or by a panic — crash-safely.
//!
//! It is a *training checkpoint* (weights saved on exit, `resume` to load
//! them), **not** `torch.utils.checkpoint`'s activation checkpointing: it
//! does not drop activations in the forward pass or recompute them in the
//! backward one, and does not change memory use or autograd in any way.
//!
//! The file is written to a temporary file in the same folder, fsynced,
//! renamed over `path`, and the folder fsynced: a process killed at any
//! moment leaves the previous checkpoint or the new one, never a torn file.
//! With `resume`, entering loads `path` into the VarStore when it exists.
//!
//! # Metrics
//! The body appends metrics with [`log_metric`]`("loss", v)`: they go to the
//! innermost open checkpoint of the thread (like [`current_device`]
//! (crate::current_device) names the innermost device), so no handle has to
//! be threaded through the body or through functions it calls — and
//! `#[checkpoint(..)]` on a function works the same. The log is saved in
//! the *same* file as the weights, as f64 tensors named
//! `__tch_scope_metric__.<name>`, so weights and metrics are replaced
//! together, atomically; `resume` restores both, and [`metrics`] reads the
//! log (e.g. to find the step to resume from). The file stays a plain
//! VarStore file: `VarStore::load` reads it and ignores the metric tensors.
//! The format follows the extension like `VarStore::save`: `.safetensors`
//! or libtorch's own.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};

use crate::durable;
use crate::{NoGrad, Scope, ScopeError};

const PREFIX: &str = "__tch_scope_metric__.";

/// A checkpoint's metric log: every value appended under each name, in
/// order.
///
/// ```
/// use tch_scope::{log_metric, metrics, scoped};
/// let vs = tch::nn::VarStore::new(tch::Device::Cpu);
/// let path = std::env::temp_dir().join(format!("doc-metrics-{}.ot", std::process::id()));
/// let log = scoped!(checkpoint(vs, &path) => {
///     log_metric("loss", 0.5);
///     log_metric("loss", 0.25);
///     metrics().unwrap()
/// });
/// assert_eq!(log.get("loss"), [0.5, 0.25]);
/// assert_eq!(log.names().collect::<Vec<_>>(), ["loss"]);
/// # std::fs::remove_file(&path).unwrap();
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics(BTreeMap<String, Vec<f64>>);

impl Metrics {
    /// The values logged under `name` (empty if none).
    ///
    /// ```
    /// assert!(tch_scope::Metrics::default().get("loss").is_empty());
    /// ```
    pub fn get(&self, name: &str) -> &[f64] {
        self.0.get(name).map_or(&[], Vec::as_slice)
    }

    /// The names logged, sorted.
    ///
    /// ```
    /// assert_eq!(tch_scope::Metrics::default().names().count(), 0);
    /// ```
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}

thread_local! {
    /// The metric logs of this thread's open checkpoints, innermost last.
    static OPEN: RefCell<Vec<Rc<RefCell<Metrics>>>> = const { RefCell::new(Vec::new()) };
}

/// Appends `value` under `name` to the innermost open checkpoint of this
/// thread; returns `false` (and logs nothing) when none is open.
///
/// ```
/// assert!(!tch_scope::log_metric("loss", 1.0)); // no checkpoint open
/// ```
pub fn log_metric(name: &str, value: f64) -> bool {
    OPEN.with_borrow(|open| match open.last() {
        Some(log) => {
            let mut log = log.borrow_mut();
            log.0.entry(name.to_owned()).or_default().push(value);
            true
        }
        None => false,
    })
}

/// A copy of the innermost open checkpoint's metric log on this thread
/// (after `resume`, what the file held plus what was logged since).
///
/// ```
/// assert_eq!(tch_scope::metrics(), None);
/// ```
pub fn metrics() -> Option<Metrics> {
    OPEN.with_borrow(|open| open.last().map(|log| log.borrow().clone()))
}

/// Saves `vs` (and the metric log) to `path` when the scope ends: a
/// training checkpoint, not `torch.utils.checkpoint`'s activation
/// recomputation (see the [module docs](self)).
///
/// ```
/// use tch::{Device, nn};
/// use tch_scope::{Checkpoint, Scope};
/// let path = std::env::temp_dir().join(format!("doc-ckpt-{}.safetensors", std::process::id()));
/// let vs = nn::VarStore::new(Device::Cpu);
/// let _lin = nn::linear(vs.root(), 2, 1, Default::default());
/// drop(Checkpoint::new(&vs, &path).enter().unwrap());
///
/// let mut again = nn::VarStore::new(Device::Cpu);
/// let _lin = nn::linear(again.root(), 2, 1, Default::default());
/// again.load(&path).unwrap(); // a plain VarStore file
/// # std::fs::remove_file(&path).unwrap();
/// ```
#[derive(Debug)]
pub struct Checkpoint<'a> {
    vs: &'a VarStore,
    path: PathBuf,
    resume: bool,
    save_on_panic: bool,
}

impl<'a> Checkpoint<'a> {
    /// Saves `vs` to `path` on exit.
    pub fn new(vs: &'a VarStore, path: impl AsRef<Path>) -> Self {
        Self {
            vs,
            path: path.as_ref().to_path_buf(),
            resume: false,
            save_on_panic: true,
        }
    }

    /// With `false`, a body that panics saves nothing: the last good file
    /// stays (the weights of a run that blew up may be NaN). The default,
    /// `true`, saves on every exit, as a Python `finally` does.
    pub fn save_on_panic(mut self, save: bool) -> Self {
        self.save_on_panic = save;
        self
    }

    /// With `true`, entering loads `path` (weights and metrics) when it
    /// exists; a file that exists but can't be loaded is a [`ScopeError`].
    pub fn resume(mut self, resume: bool) -> Self {
        self.resume = resume;
        self
    }

    fn error(&self, reason: impl Into<String>) -> ScopeError {
        ScopeError::new(format!("checkpoint({:?})", self.path), None, reason)
    }
}

/// Saves on drop. A save that fails leaves the previous checkpoint in
/// place, and reaches the caller: on the success path of
/// [`try_scoped!`](crate::try_scoped) as its `Err`, of
/// [`scoped!`](crate::scoped) as a panic; on a panic path or a plain drop,
/// the exit hook ([`set_exit_hook`](crate::set_exit_hook)) hears it.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct CheckpointGuard<'a> {
    vs: &'a VarStore,
    path: PathBuf,
    log: Rc<RefCell<Metrics>>,
    save_on_panic: bool,
    _not_send: crate::PhantomNotSend,
}

impl<'a> Scope for Checkpoint<'a> {
    type Guard = CheckpointGuard<'a>;
    type Error = ScopeError;

    /// # Errors
    /// The path can't be written (its folder is missing or not writable,
    /// or it is a folder), or with `resume`, the file exists but can't be
    /// loaded.
    fn enter(&mut self) -> Result<CheckpointGuard<'a>, ScopeError> {
        durable::check_writable(&self.path)
            .map_err(|e| self.error(format!("{} can't be written: {e}", self.path.display())))?;
        let mut log = Metrics::default();
        if self.resume && self.path.exists() {
            log = load(self.vs, &self.path).map_err(|e| self.error(e))?;
        }
        let log = Rc::new(RefCell::new(log));
        OPEN.with_borrow_mut(|open| open.push(Rc::clone(&log)));
        Ok(CheckpointGuard {
            vs: self.vs,
            path: self.path.clone(),
            log,
            save_on_panic: self.save_on_panic,
            _not_send: crate::PhantomNotSend::NEW,
        })
    }
}

impl Drop for CheckpointGuard<'_> {
    fn drop(&mut self) {
        // Usually the last entry; searched so that out-of-order drops of
        // hand-held guards stay correct.
        OPEN.with_borrow_mut(|open| {
            if let Some(i) = open.iter().rposition(|l| Rc::ptr_eq(l, &self.log)) {
                open.remove(i);
            }
        });
        if !self.save_on_panic && std::thread::panicking() {
            return;
        }
        let log = self.log.borrow();
        if let Err(e) = save(self.vs, &self.path, &log) {
            crate::exit::report(
                "checkpoint",
                format_args!("could not save the checkpoint {}: {e}", self.path.display()),
            );
        }
    }
}

fn is_safetensors(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "safetensors")
}

/// Writes the variables and the metric log to `path`, crash-safely.
fn save(vs: &VarStore, path: &Path, log: &Metrics) -> Result<(), String> {
    let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    for (name, values) in &log.0 {
        named.push((format!("{PREFIX}{name}"), Tensor::from_slice(values)));
    }
    durable::replace(path, |tmp| {
        let written = if is_safetensors(path) {
            Tensor::write_safetensors(&named, tmp)
        } else {
            Tensor::save_multi(&named, tmp)
        };
        written.map_err(|e| durable::without_backtrace(&e.to_string()).to_owned())
    })
}

/// Copies the file's tensors into `vs` (every variable must be there, with
/// its shape) and returns the metric log stored with them.
fn load(vs: &VarStore, path: &Path) -> Result<Metrics, String> {
    let named = if is_safetensors(path) {
        Tensor::read_safetensors(path)
    } else {
        Tensor::load_multi_with_device(path, vs.device())
    }
    .map_err(|e| e.to_string())?;
    let mut log = Metrics::default();
    let mut tensors = BTreeMap::new();
    for (name, t) in named {
        match name.strip_prefix(PREFIX) {
            Some(metric) => {
                let values = Vec::<f64>::try_from(t.to_kind(Kind::Double).to(Device::Cpu))
                    .map_err(|e| format!("metric {metric}: {e}"))?;
                log.0.insert(metric.to_owned(), values);
            }
            None => {
                tensors.insert(name, t);
            }
        }
    }
    let _no_grad = NoGrad.enter().map_err(|e| e.to_string())?;
    for (name, mut var) in vs.variables() {
        let src = tensors
            .get(&name)
            .ok_or_else(|| format!("{} has no variable {name}", path.display()))?;
        if src.size() != var.size() {
            return Err(format!(
                "variable {name} has shape {:?} in {}, {:?} in the VarStore",
                src.size(),
                path.display(),
                var.size()
            ));
        }
        var.f_copy_(src)
            .map_err(|e| format!("variable {name}: {e}"))?;
    }
    Ok(log)
}
