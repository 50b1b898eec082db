//! The checkpoint's guard: what its exit saves (the last step boundary
//! inside a `steps` loop, else the live state), and the end of the process
//! after a stop.

use std::path::PathBuf;
use std::sync::Arc;

use tch::nn::VarStore;

use super::file::named_variables;
use super::log::Metrics;
use super::open::{Run, close};
use super::ranks::{self, Ranks};
use super::state::{self, Persist};
use super::writer::Snapshot;
use crate::Outcome;
use crate::durable::{self, Replaced, Turn};
use crate::error::DeviceName;
use crate::optim::Optimizer;
use crate::scopes::deadline::{self, DeadlineExcluded};
use crate::stop::{self, StopListener};
use crate::sync::lock;

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
pub struct CheckpointGuard<'a> {
    pub(super) vs: &'a VarStore,
    pub(super) optimizer: Option<Arc<dyn Optimizer>>,
    pub(super) state: Option<Arc<dyn Persist>>,
    pub(super) path: PathBuf,
    /// `path` as the order of the saves knows it (see `durable::Turn`).
    pub(super) destination: PathBuf,
    /// Saved in parts, one per rank (see `ranks`).
    pub(super) ranks: Option<Ranks>,
    pub(super) run: Arc<Run>,
    pub(super) save_on_failure: bool,
    /// How the body ended, when `Scope::exit` told it.
    pub(super) outcome: Option<Outcome>,
    /// The polling thread's count of operators refused by deadlines, at
    /// entry or at the last resume.
    pub(super) trips: u64,
    /// Whether a deadline refused an operator during an earlier poll.
    pub(super) tripped: bool,
    /// SIGINT, SIGTERM, … request a stop while a checkpoint is open.
    pub(super) listener: Option<StopListener>,
    /// Open on the thread that entered it (`OPEN`); only a suspended task
    /// moves it (see `MovesWithTask` below).
    pub(super) _not_send: crate::PhantomNotSend,
}

impl std::fmt::Debug for CheckpointGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointGuard")
            .field("path", &self.path)
            .field("step", &lock(&self.run.boundaries).step)
            .finish_non_exhaustive()
    }
}

// SAFETY: the guard's one tie to a thread is its entry in that thread's
// `OPEN` (and its stop listener's mark), which `suspend` takes off the
// thread a poll leaves and `resume` puts on the thread of the next poll
// (`Spanned` calls them around each move, and before it drops the guard);
// its other fields are `Send` (`&VarStore`: a VarStore is `Sync`; a run
// state and the optimizer are shared handles, `Send`), and its
// step boundaries are reached only from the thread it is open on.
unsafe impl crate::process_wide::MovesWithTask for CheckpointGuard<'_> {}

/// What an exit saves: the last step boundary, or the live state (the
/// weights and the training state, named for the file), with the metric
/// log.
enum Contents {
    Boundary(Snapshot, Metrics),
    Live(i64, Vec<(String, tch::Tensor)>, Metrics),
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

    /// The exit's save: the last step boundary inside a `steps` loop
    /// (unless the background writer saved it already), else the live
    /// state. `None`: nothing to write.
    fn what_to_save(&self) -> Result<Option<Contents>, String> {
        let mut b = lock(&self.run.boundaries);
        // No step loop reaches the borrows from here on.
        b.live = None;
        let inside = b.inside();
        let last: Option<Snapshot> = b.last();
        let step = b.step;
        drop(b);
        let log = lock(&self.run.log);
        if inside {
            return Ok(last.map(|s| {
                let metrics = log.truncated(&s.metrics);
                Contents::Boundary(s, metrics)
            }));
        }
        let _unchecked = DeadlineExcluded::new();
        let mut tensors = named_variables(self.vs);
        tensors.extend(state::capture(
            step,
            self.optimizer.as_deref(),
            self.state.as_deref(),
        )?);
        Ok(Some(Contents::Live(step, tensors, log.clone())))
    }
}

impl Drop for CheckpointGuard<'_> {
    fn drop(&mut self) {
        let outermost = !close(&self.run);
        self.save();
        // Ends the process as a stop's signal would have, once every open
        // checkpoint has saved (the outermost last).
        drop(self.listener.take());
        if outermost {
            stop::finish_if_stopped();
        }
    }
}

impl CheckpointGuard<'_> {
    fn save(&mut self) {
        let skip = !self.save_on_failure && self.failed();
        if skip {
            // Still: no write of this checkpoint outlives it.
            let mut b = lock(&self.run.boundaries);
            b.live = None;
            b.writer.wait();
            return;
        }
        // The exits decide the order of the saves to one path: the turn is
        // taken before anything of the save runs.
        let turn = Turn::take(std::mem::take(&mut self.destination));
        // The save's operators must run even past a deadline: a refused
        // one would lose the checkpoint (and in tch's panicking calls,
        // abort the process while a panic unwinds).
        let _unchecked = DeadlineExcluded::new();
        let saved = self.what_to_save().and_then(|what| match what {
            Some(Contents::Boundary(snapshot, log)) => {
                snapshot.save(&self.path, self.ranks, &turn, &log)
            }
            Some(Contents::Live(step, tensors, log)) => {
                let named: Vec<(&str, &tch::Tensor)> =
                    tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
                ranks::save(
                    &self.path,
                    self.ranks,
                    step,
                    &turn,
                    &named,
                    &log,
                    &|| Ok(()),
                )
            }
            None => Ok(Replaced::Written),
        });
        match saved {
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
