//! `checkpoint(vs, "path")`: a `VarStore` saved crash-safely when the scope
//! ends (documented on [`Checkpoint`], where the rustdoc shows it).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tch::nn::VarStore;

mod file;

use file::{load, save};

use crate::durable::{self, Replaced, Turn};
use crate::error::DeviceName;
use crate::scopes::deadline::{self, DeadlineExcluded};
use crate::sync::lock;
use crate::{Outcome, Scope, ScopeError};

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
    /// ```no_run
    /// assert!(tch_scope::Metrics::default().get("loss").is_empty());
    /// ```
    pub fn get(&self, name: &str) -> &[f64] {
        self.0.get(name).map_or(&[], Vec::as_slice)
    }

    /// The names logged, sorted.
    ///
    /// ```no_run
    /// assert_eq!(tch_scope::Metrics::default().names().count(), 0);
    /// ```
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}

/// One checkpoint's log, shared by its guard and the stack of the thread
/// it is open on (a lock, not a `RefCell`: the guard of a task moves
/// between threads with it).
type Log = Arc<Mutex<Metrics>>;

thread_local! {
    /// The metric logs of the checkpoints open on this thread, innermost
    /// last: those entered here and not left, less those of tasks
    /// suspended meanwhile (see the module docs).
    static OPEN: RefCell<Vec<Log>> = const { RefCell::new(Vec::new()) };
}

/// Puts `log` on top of this thread's open checkpoints.
fn open(log: &Log) {
    OPEN.with_borrow_mut(|open| open.push(Arc::clone(log)));
}

/// Takes `log` off this thread's open checkpoints, wherever it is (the
/// innermost usually; searched, so that hand-held guards dropped out of
/// order stay right). Nothing if it is not there.
fn close(log: &Log) {
    // `try_with`: a guard dropped while the thread's locals are torn down.
    let _ = OPEN.try_with(|open| {
        let mut open = open.borrow_mut();
        if let Some(i) = open.iter().rposition(|l| Arc::ptr_eq(l, log)) {
            open.remove(i);
        }
    });
}

/// Appends `value` under `name` to the innermost open checkpoint of this
/// thread; returns `false` (and logs nothing) when none is open.
///
/// ```no_run
/// assert!(!tch_scope::log_metric("loss", 1.0)); // no checkpoint open
/// ```
pub fn log_metric(name: &str, value: f64) -> bool {
    OPEN.with_borrow(|open| match open.last() {
        Some(log) => {
            let mut log = lock(log);
            log.0.entry(name.to_owned()).or_default().push(value);
            true
        }
        None => false,
    })
}

/// A copy of the innermost open checkpoint's metric log on this thread
/// (after `resume`, what the file held plus what was logged since).
///
/// ```no_run
/// assert_eq!(tch_scope::metrics(), None);
/// ```
pub fn metrics() -> Option<Metrics> {
    OPEN.with_borrow(|open| open.last().map(|log| lock(log).clone()))
}

/// Saves `vs` (and the metric log) to `path` when the scope ends: a
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
/// A `deadline` stops the body at the next operator, wherever that is: in
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
/// innermost open checkpoint of the thread (like [`current_device`]
/// (crate::current_device) names the innermost device), so no handle has to
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
/// of a task, neither [`log_metric`] nor [`metrics`] on that thread sees
/// its checkpoint. Likewise, with
/// [`save_on_failure(false)`](Checkpoint::save_on_failure), an operator
/// refused by a deadline counts against the checkpoint only if it was
/// refused while its own task was being polled.
///
/// The log is saved in
/// the *same* file as the weights, as f64 tensors named
/// `__tch_scope_metric__.<name>`, so weights and metrics are replaced
/// together, atomically; `resume` restores both, and [`metrics`] reads the
/// log (e.g. to find the step to resume from). The file stays a plain
/// VarStore file: `VarStore::load` reads it and ignores the metric tensors.
/// The format follows the extension like `VarStore::save`: `.safetensors`
/// or libtorch's own.
#[derive(Debug)]
pub struct Checkpoint<'a> {
    vs: &'a VarStore,
    path: PathBuf,
    resume: bool,
    save_on_failure: bool,
}

impl<'a> Checkpoint<'a> {
    /// Saves `vs` to `path` on exit.
    pub fn new(vs: &'a VarStore, path: impl AsRef<Path>) -> Self {
        Self {
            vs,
            path: path.as_ref().to_path_buf(),
            resume: false,
            save_on_failure: true,
        }
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

/// Saves on drop. A save that fails leaves the previous checkpoint in
/// place, and reaches the caller: on the success path of
/// [`try_scoped!`](crate::try_scoped) as its `Err`, of
/// [`scoped!`](crate::scoped) as a panic; on a failed path (a panic, an
/// `Err`, a passed deadline: the caller gets that error) or a plain drop,
/// the exit hook ([`set_exit_hook`](crate::set_exit_hook)) hears it.
///
/// A save whose rename succeeded but whose folder then could not be
/// fsynced is done, not failed: the new file is in place and complete (its
/// data was fsynced before the rename), so no `Err` and no panic. Only its
/// surviving a power loss or an OS crash is unconfirmed (the path then
/// holds the previous file or the new one, never a torn one): the exit
/// hook hears a notice, "saved … in full, but could not fsync its folder
/// …: the save is not confirmed durable …".
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct CheckpointGuard<'a> {
    vs: &'a VarStore,
    path: PathBuf,
    /// `path` as the order of the saves knows it (see `durable::Turn`).
    destination: PathBuf,
    log: Log,
    save_on_failure: bool,
    /// How the body ended, when `Scope::exit` told it.
    outcome: Option<Outcome>,
    /// The polling thread's count of operators refused by deadlines, at
    /// entry or at the last resume.
    trips: u64,
    /// Whether a deadline refused an operator during an earlier poll.
    tripped: bool,
    /// Open on the thread that entered it (`OPEN`); only a suspended task
    /// moves it (see `MovesWithTask` below).
    _not_send: crate::PhantomNotSend,
}

// SAFETY: the guard's one tie to a thread is its entry in that thread's
// `OPEN`, which `suspend` takes off the thread a poll leaves and `resume`
// puts on the thread of the next poll (`Spanned` calls them around each
// move, and before it drops the guard); its other fields are `Send`
// (`&VarStore`: a VarStore is `Sync`).
unsafe impl crate::process_wide::MovesWithTask for CheckpointGuard<'_> {}

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
        let log = Arc::new(Mutex::new(log));
        open(&log);
        Ok(CheckpointGuard {
            vs: self.vs,
            path: self.path.clone(),
            destination: durable::destination(&self.path),
            log,
            save_on_failure: self.save_on_failure,
            outcome: None,
            trips: deadline::trips(),
            tripped: false,
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
        close(&guard.log);
        guard.tripped |= deadline::trips() != guard.trips;
    }

    /// The task is polled (perhaps on another thread): the checkpoint is
    /// the innermost open one there again.
    fn resume(guard: &mut CheckpointGuard<'a>) {
        open(&guard.log);
        guard.trips = deadline::trips();
    }
}

impl CheckpointGuard<'_> {
    /// Whether the scope is being left by a failure (see
    /// [`Checkpoint::save_on_failure`]).
    fn failed(&self) -> bool {
        let outcome = self
            .outcome
            .unwrap_or_else(|| Outcome::at_exit_or(Outcome::Completed));
        outcome != Outcome::Completed || self.tripped || deadline::trips() != self.trips
    }
}

impl Drop for CheckpointGuard<'_> {
    fn drop(&mut self) {
        close(&self.log);
        if !self.save_on_failure && self.failed() {
            return;
        }
        // The exits decide the order of the saves to one path: the turn is
        // taken before anything of the save runs.
        let turn = Turn::take(std::mem::take(&mut self.destination));
        // The save's operators must run even past a deadline: a refused
        // one would lose the checkpoint (and in tch's panicking calls,
        // abort the process while a panic unwinds).
        let _unchecked = DeadlineExcluded::new();
        let log = lock(&self.log);
        match save(self.vs, &self.path, &turn, &log) {
            Ok(Replaced::Written | Replaced::Superseded) => {}
            // Saved: a notice, not a failed exit (see `durable`).
            Ok(Replaced::Unsynced(why)) => durable::unsynced("checkpoint", &self.path, &why),
            Err(e) => crate::exit::report(
                "checkpoint",
                format_args!(
                    "could not save the checkpoint {}: {e} (a VarStore on {})",
                    self.path.display(),
                    DeviceName(self.vs.device())
                ),
            ),
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
