//! `checkpoint(vs, "path")`: a `VarStore` saved crash-safely when the scope
//! ends (documented on [`Checkpoint`], where the rustdoc shows it).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tch::nn::VarStore;

mod copies;
mod file;
mod guard;
mod log;
mod open;
mod progress;
mod ranks;
mod read;
mod snapshot;
mod state;
mod steps;
mod writer;

pub use guard::CheckpointGuard;
pub use log::Metrics;
pub use open::{log_metric, metrics};
pub use progress::suspend_progress;
pub use read::SavedRun;
pub use state::RunState;
pub use steps::{Steps, steps};

use file::{check_variables, copy_variables, named_variables};
use open::{Run, close};
use ranks::Ranks;
use snapshot::{Boundaries, Live};
use state::Persist;

use crate::durable;
use crate::optim::Optimizer;
use crate::scopes::deadline;
use crate::stop;
use crate::{Outcome, Scope, ScopeError};

const PREFIX: &str = "__tch_scope_metric__.";

/// Saves `vs` — with the optimizer's state, the step reached, the
/// generators' states, a run state and the metric log — to `path` when the
/// scope ends, and every `k` steps of a [`steps`] loop: a
/// training checkpoint, not `torch.utils.checkpoint`'s activation
/// recomputation.
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
///
/// — normally, through `?`/`return`, or by a panic — crash-safely.
///
/// It is a *training checkpoint* (weights saved on exit, `resume` to load
/// them), **not** `torch.utils.checkpoint`'s activation checkpointing: it
/// does not drop activations in the forward pass or recompute them in the
/// backward one, and does not change memory use or autograd in any way.
///
/// The file is written to a temporary file in the same folder, every write
/// and the final flush checked, fsynced, renamed over `path`, and the folder
/// fsynced: a process killed at any moment, a full disk or a file-size limit
/// leaves the previous checkpoint or the new one, never a torn file; a save
/// that fails is reported (see [`CheckpointGuard`]), never an abort. A save
/// whose rename succeeded but whose folder's fsync failed is saved, not
/// failed: the exit hook hears that its durability is not confirmed.
/// With `resume`, entering loads `path` into the VarStore when it exists.
///
/// # A run that survives being stopped
/// With [`optimizer`](Checkpoint::optimizer) (`optimizer = opt`),
/// [`state`](Checkpoint::state) (`state = s`) and a [`steps`] loop, the file
/// holds the whole training state — the weights, the optimizer's state,
/// the step reached, the default generators' states (the CPU's and every
/// present CUDA device's), the run state and the metrics — and `resume`
/// puts all of it back, so a run stopped any number of times ends with
/// the weights of a run never stopped, bitwise:
///
/// ```no_run
/// use tch::nn::{self, Module, VarStore};
/// use tch::{Device, Kind, Tensor};
/// use tch_scope::{scoped, steps, optim::Adam};
/// let vs = VarStore::new(Device::Cpu);
/// let lin = nn::linear(vs.root(), 4, 1, Default::default());
/// let opt = Adam::new(&vs, 1e-3).unwrap();
/// scoped!(checkpoint(vs, "run.ot", resume, optimizer = opt, every = 100) => {
///     for step in steps(10_000) {
///         let x = Tensor::randn([32, 4], (Kind::Float, Device::Cpu));
///         let loss = lin.forward(&x).square().mean(Kind::Float);
///         opt.backward_step(&loss).unwrap();
///         tch_scope::log_metric("loss", loss.double_value(&[]));
///     }
/// });
/// ```
///
/// Inside the loop every exit saves the state of the last step boundary,
/// never half a step, and every `every` steps the state a boundary holds
/// in memory is written on a background thread (see [`steps`] for what a
/// boundary holds and what it costs). A run loses
/// steps only when its process dies without its exits (SIGKILL): those
/// since the last periodic save that finished. [`Checkpoint::read`] reads
/// the step, the metrics and the run state back without a scope.
///
/// # Several ranks
/// Entered inside a `distributed` scope of more than one rank (the same
/// `path` on every rank), the checkpoint is saved in parts, one set per
/// step: rank 0 writes the weights and the optimizer's state once, every
/// rank its own generators' states, run state and metrics. A step counts
/// as complete only when every rank's part of it is written; the last
/// complete step is kept until a newer one is complete, and `resume`
/// loads the newest step that all ranks completed (the ranks check with
/// one collective that they agree), never one some rank lacks. See
/// [`Checkpoint::complete_step`] and [`Checkpoint::part`] for the files.
///
/// # Exits
/// The save runs with every deadline excluded: a `deadline` that has passed
/// (perhaps the reason the body ended) refuses no operator of the save (the
/// metric tensors, a CUDA VarStore's copy to the CPU), so
/// `scoped!(deadline(d), checkpoint(vs, p) => …)` writes the checkpoint and
/// then ends with the deadline's error. The save calls only tch's fallible
/// functions: it never panics.
///
/// Two checkpoints of one path in one process (two threads, or nested):
/// the file keeps the save of the checkpoint left last — the order of the
/// exits decides, not which write happens to finish last.
///
/// # What a failed exit saves
/// Inside a [`steps`] loop: the last step boundary's state (above).
/// Elsewhere, a `deadline` stops the body at the next operator, wherever that is: in
/// the middle of an optimizer step (some parameters updated, others not),
/// or of a backward pass (a `.grad` partly accumulated). By default the
/// checkpoint saves on every exit, as a Python `finally` does — that
/// half-done state too. With
/// [`save_on_failure(false)`](Checkpoint::save_on_failure)
/// (`checkpoint(vs, p, save_on_failure = false)` in the macros) no failed exit
/// saves, and the last good file stays: see that method for what counts as
/// failed.
///
/// # Metrics
/// The body appends metrics with [`log_metric`]`("loss", v)`: they go to the
/// innermost open checkpoint of the thread (like
/// [`current_device`](crate::current_device) names the innermost device), so no handle has to
/// be threaded through the body or through functions it calls — and
/// `#[checkpoint(..)]` on a function works the same.
///
/// In async code (an `async fn` with `#[checkpoint(..)]`, a `scoped!`
/// body that awaits) a checkpoint is open on a thread only while its task
/// is being polled there: when a poll suspends, the checkpoint steps off
/// the thread ([`Scope::suspend`]), and the next poll puts it back on top
/// of whatever is open on the polling thread ([`Scope::resume`]). So a
/// task's metrics go to its own checkpoint however its polls interleave
/// with other tasks' (`join!`, `FuturesUnordered`, a `LocalSet`, a
/// current-thread runtime), and the task may move between the threads of
/// a multi-thread runtime: the macros' future is `Send`. Between two polls
/// of a task, neither [`log_metric`] nor [`metrics()`] on that thread sees
/// its checkpoint. Likewise, with
/// [`save_on_failure(false)`](Checkpoint::save_on_failure), an operator
/// refused by a deadline counts against the checkpoint only if it was
/// refused while its own task was being polled.
///
/// The log is saved in
/// the *same* file as the weights, as f64 tensors named
/// `__tch_scope_metric__.<name>`, so weights and metrics are replaced
/// together, atomically; `resume` restores both, and [`metrics()`] reads the
/// log (e.g. to find the step to resume from). The file stays a plain
/// VarStore file: `VarStore::load` reads it and ignores the metric tensors.
/// The format follows the extension like `VarStore::save`: `.safetensors`
/// or libtorch's own.
pub struct Checkpoint<'a> {
    vs: &'a VarStore,
    path: PathBuf,
    resume: bool,
    save_on_failure: bool,
    optimizer: Option<Arc<dyn Optimizer>>,
    state: Option<Arc<dyn Persist>>,
    every: Option<i64>,
}

impl std::fmt::Debug for Checkpoint<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("path", &self.path)
            .field("resume", &self.resume)
            .field("save_on_failure", &self.save_on_failure)
            .field("optimizer", &self.optimizer.as_ref().map(|o| o.name()))
            .field("state", &self.state.is_some())
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

impl<'a> Checkpoint<'a> {
    /// Saves `vs` to `path` on exit.
    pub fn new(vs: &'a VarStore, path: impl AsRef<Path>) -> Self {
        Self {
            vs,
            path: path.as_ref().to_path_buf(),
            resume: false,
            save_on_failure: true,
            optimizer: None,
            state: None,
            every: None,
        }
    }

    /// Saves `optimizer`'s state (moments, step counts, momentum buffers,
    /// options) with the weights, and loads it back on `resume`
    /// (`optimizer = opt` in the macros). The checkpoint keeps a second
    /// handle to it ([`Optimizer::handle`]), so the body still steps it
    /// (its methods take `&self`) and nothing the checkpoint holds can
    /// outlive it. tch's `nn::Optimizer` can't be named
    /// (its state is out of Rust's reach): use
    /// [`tch_scope::optim`](crate::optim)'s.
    ///
    /// On `resume`, a file without an optimizer state is refused (resuming
    /// would restart the optimizer cold); delete the file to start afresh.
    pub fn optimizer<O: Optimizer>(self, optimizer: &O) -> Self {
        self.optimizer_dyn(optimizer)
    }

    /// [`optimizer`](Self::optimizer) of a trait object (the macros').
    pub(crate) fn optimizer_dyn(mut self, optimizer: &dyn Optimizer) -> Self {
        self.optimizer = Some(optimizer.handle());
        self
    }

    /// Saves after every `k` completed steps of a [`steps`] loop
    /// (`every = k` in the macros), on a background thread, as well as at
    /// the exit. `k` must be at least 1 (a [`ScopeError`] on entry).
    pub fn every(mut self, k: i64) -> Self {
        self.every = Some(k);
        self
    }

    /// Saves `state` (JSON, through serde) with the weights at every step
    /// boundary, and puts the saved value back on `resume` (`state = s`
    /// in the macros): see [`RunState`].
    pub fn state<T: Serialize + DeserializeOwned + Send + 'static>(
        mut self,
        state: &RunState<T>,
    ) -> Self {
        self.state = Some(state.handle());
        self
    }

    /// With `false`, a scope that fails saves nothing: the last good file
    /// stays (the weights of a run that blew up may be NaN, those of a step
    /// a deadline cut short half updated). The default, `true`, saves on
    /// every exit, as a Python `finally` does.
    ///
    /// Failed is every exit but a completed one: a panic; an `Err` that the
    /// expansion saw (an attributed function returning `Result`,
    /// [`ScopeStack::close`](crate::ScopeStack::close)`(Outcome::Failed)`);
    /// a scope of the same list that ended the body (a passed `deadline`,
    /// a later scope that could not be entered); and, wherever the outcome
    /// is not heard (a guard dropped by hand, async code), any operator a
    /// deadline refused on this thread while the checkpoint was open.
    ///
    /// ```no_run
    /// use tch::{Device, nn};
    /// use tch_scope::{Checkpoint, Outcome, ScopeStack};
    /// let path = std::env::temp_dir().join(format!("doc-ckpt-fail-{}.ot", std::process::id()));
    /// let vs = nn::VarStore::new(Device::Cpu);
    /// let _lin = nn::linear(vs.root(), 2, 1, Default::default());
    /// let mut stack = ScopeStack::new();
    /// stack.enter(Checkpoint::new(&vs, &path).save_on_failure(false)).unwrap();
    /// stack.close(Outcome::Failed);
    /// assert!(!path.exists()); // nothing saved
    /// ```
    pub fn save_on_failure(mut self, save: bool) -> Self {
        self.save_on_failure = save;
        self
    }

    /// The former name of [`save_on_failure`](Self::save_on_failure),
    /// which it calls: it covers every failed exit, not only a panic.
    #[deprecated(note = "renamed `save_on_failure`: it covers every failed exit, not only a panic")]
    pub fn save_on_panic(self, save: bool) -> Self {
        self.save_on_failure(save)
    }

    /// With `true`, entering loads `path` (weights and metrics) when it
    /// exists; a file that exists but can't be loaded is a [`ScopeError`].
    pub fn resume(mut self, resume: bool) -> Self {
        self.resume = resume;
        self
    }

    fn error(&self, reason: impl Into<String>) -> ScopeError {
        ScopeError::new(
            format!("checkpoint({:?})", self.path),
            Some(self.vs.device()),
            reason,
        )
    }
}

impl<'a> Checkpoint<'a> {
    /// With `resume`, loads the file: the weights, the training state and
    /// the metric log; the step it holds (0 if none).
    fn load(&self, ranks: Option<Ranks>) -> Result<(Metrics, i64), ScopeError> {
        let read = match ranks {
            // Several ranks: the newest step all of them completed.
            Some(r) if self.resume => {
                ranks::read(&self.path, r, self.vs.device()).map_err(|e| self.error(e))?
            }
            // A fresh run of several ranks replaces what the folder holds.
            Some(r) => {
                ranks::forget(&self.path, r);
                None
            }
            None if self.resume && self.path.exists() => {
                Some(file::read(&self.path, self.vs.device()).map_err(|e| self.error(e))?)
            }
            _ => None,
        };
        let Some((mut tensors, log)) = read else {
            return Ok((Metrics::default(), 0));
        };
        let extras = state::split(&mut tensors).map_err(|e| self.error(e))?;
        check_variables(self.vs, &self.path, &tensors).map_err(|e| self.error(e))?;
        state::restore(&extras, self.optimizer.as_deref(), self.state.as_deref())
            .map_err(|e| self.error(e))?;
        copy_variables(self.vs, &tensors).map_err(|e| self.error(e))?;
        Ok((log, extras.step.unwrap_or(0)))
    }
}

impl<'a> Scope for Checkpoint<'a> {
    type Guard = CheckpointGuard<'a>;
    type Error = ScopeError;

    /// # Errors
    /// The path can't be written (its folder is missing or not writable,
    /// or it is a folder); `every` is below 1; the stop signals' handlers
    /// can't be installed; or with `resume`, the file exists but can't be
    /// loaded (a variable missing or of another shape, no optimizer state
    /// for the optimizer named, a run state of another type, a generator
    /// of a CUDA device that is not present).
    fn enter(&mut self) -> Result<CheckpointGuard<'a>, ScopeError> {
        durable::check_writable(&self.path)
            .map_err(|e| self.error(format!("{} can't be written: {e}", self.path.display())))?;
        if let Some(k) = self.every.filter(|&k| k < 1) {
            return Err(self.error(format!("`every` must be at least 1 step, got {k}")));
        }
        let listener = stop::listen()?;
        let ranks = Ranks::current();
        let (log, step) = self.load(ranks)?;
        let destination = durable::destination(&self.path);
        let live = Live {
            weights: named_variables(self.vs),
            optimizer: self.optimizer.clone(),
            user: self.state.clone(),
            path: self.path.clone(),
            destination: destination.clone(),
            ranks,
        };
        let run = Arc::new(Run {
            log: Mutex::new(log),
            boundaries: Mutex::new(Boundaries::new(live, step, self.every)),
        });
        open::open(&run);
        Ok(CheckpointGuard {
            vs: self.vs,
            optimizer: self.optimizer.clone(),
            state: self.state.clone(),
            path: self.path.clone(),
            destination,
            ranks,
            run,
            save_on_failure: self.save_on_failure,
            outcome: None,
            trips: deadline::trips(),
            tripped: false,
            listener: Some(listener),
            _not_send: crate::PhantomNotSend::NEW,
        })
    }

    /// Keeps the outcome for the save (`save_on_failure`).
    fn exit(guard: &mut CheckpointGuard<'a>, outcome: Outcome) {
        guard.outcome = Some(outcome);
    }

    /// The task suspends: the checkpoint is no longer open on this thread,
    /// so other tasks polled here meanwhile neither log into it nor count
    /// their refused operators against it.
    fn suspend(guard: &mut CheckpointGuard<'a>) {
        close(&guard.run);
        guard.tripped |= deadline::trips() != guard.trips;
        if let Some(l) = &mut guard.listener {
            l.suspend();
        }
    }

    /// The task is polled (perhaps on another thread): the checkpoint is
    /// the innermost open one there again.
    fn resume(guard: &mut CheckpointGuard<'a>) {
        open::open(&guard.run);
        guard.trips = deadline::trips();
        if let Some(l) = &mut guard.listener {
            l.resume();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Metrics, log_metric, metrics};

    #[test]
    fn without_a_checkpoint_nothing_is_logged() {
        assert!(Metrics::default().get("loss").is_empty());
        assert_eq!(Metrics::default().names().count(), 0);
        assert!(!log_metric("loss", 1.0));
        assert_eq!(metrics(), None);
    }
}
