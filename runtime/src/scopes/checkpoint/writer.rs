//! The background writer: a periodic save's file is written on a thread of
//! its own, so the training thread pays only for the boundary (aliases,
//! and copies of what changed that no optimizer aliases). At
//! most one write is in flight; the next periodic save, and the exit save,
//! wait for it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::ranks::{self, Ranks};
use super::state::OPTIMIZER;
use crate::optim::Hold;
use tch::Tensor;

use super::log::Metrics;
use crate::durable::{self, Replaced, Turn};
use crate::sync::lock;

/// The state at one step boundary.
pub(super) struct Snapshot {
    /// Completed steps.
    pub step: i64,
    /// The weights (aliases of the optimizer's parameters, copies of the
    /// other variables), then the step, the generators, the run state.
    pub tensors: Vec<(String, Tensor)>,
    /// The optimizer's state (its own names), its buffers aliased.
    pub optimizer: Vec<(String, Tensor)>,
    /// The metric log's lengths then.
    pub metrics: Vec<(String, usize)>,
    /// The aliased parameters, to check before a save is committed: the
    /// name, an alias sharing the parameter's version counter, its index
    /// in the optimizer's `hold`.
    pub checks: Vec<(String, Tensor, usize)>,
    /// The optimizer's hold on what it aliased (after the tensors: dropped
    /// after them).
    pub hold: Option<Arc<Hold>>,
    /// The hold on the copies of the other variables (kept for its drop).
    pub _copied: Arc<Hold>,
}

impl Snapshot {
    /// Writes the snapshot and `log` to `path` (in parts with `ranks`) in
    /// `turn`.
    pub(super) fn save(
        &self,
        path: &Path,
        ranks: Option<Ranks>,
        turn: &Turn,
        log: &Metrics,
    ) -> Result<Replaced, String> {
        let names: Vec<String> = self
            .optimizer
            .iter()
            .map(|(n, _)| format!("{OPTIMIZER}{n}"))
            .collect();
        let named: Vec<(&str, &Tensor)> = (self.tensors.iter().map(|(n, t)| (n.as_str(), t)))
            .chain(
                names
                    .iter()
                    .map(String::as_str)
                    .zip(self.optimizer.iter().map(|(_, t)| t)),
            )
            .collect();
        ranks::save(path, ranks, self.step, turn, &named, log, &|| self.intact())
    }

    /// Whether every aliased parameter still holds the boundary's values:
    /// the optimizer never writes a storage a boundary holds, but code of
    /// the user's may (`p.copy_(…)` under `no_grad` before the next
    /// update). Checked after the file is written and before it replaces
    /// the previous one, so a save never commits values of another step.
    pub(super) fn intact(&self) -> Result<(), String> {
        let Some(hold) = &self.hold else {
            return Ok(());
        };
        for (name, alias, i) in &self.checks {
            let now = alias.f_internal_version().map_err(|e| e.to_string())?;
            if !hold.intact(*i, now) {
                return Err(format!(
                    "the parameter `{name}` was written in place after the boundary of step {} \
                     by code outside the optimizer, so that boundary's state is gone (from now on \
                     the checkpoint copies that parameter at each boundary)",
                    self.step
                ));
            }
        }
        Ok(())
    }
}

/// A write's end: the snapshot's buffers back, and whether it was saved.
type Done = (Snapshot, bool);

/// What a write needs, handed to its thread.
struct Job {
    path: PathBuf,
    ranks: Option<Ranks>,
    turn: Turn,
    snapshot: Snapshot,
    log: Metrics,
}

impl Job {
    fn run(self) -> Done {
        let saved = write(
            &self.path,
            self.ranks,
            &self.turn,
            &self.snapshot,
            &self.log,
        );
        (self.snapshot, saved)
    }
}

#[derive(Default)]
pub(super) struct Writer {
    /// `None` from the thread only if it found no job (never).
    in_flight: Option<JoinHandle<Option<Done>>>,
    /// A write that ended on the training thread (no thread could start).
    finished: Option<Done>,
}

impl Writer {
    /// Writes `snapshot` to `path` on a new thread, in `turn`.
    pub(super) fn start(
        &mut self,
        path: PathBuf,
        ranks: Option<Ranks>,
        turn: Turn,
        snapshot: Snapshot,
        log: Metrics,
    ) {
        debug_assert!(self.in_flight.is_none(), "one write at a time");
        // `spawn` consumes its closure even when it fails: the job waits in
        // a slot the thread takes it from, so a thread that can't be made
        // leaves it here, to run on this thread (a stall, not a lost save).
        let slot = Arc::new(Mutex::new(Some(Job {
            path,
            ranks,
            turn,
            snapshot,
            log,
        })));
        let theirs = Arc::clone(&slot);
        let spawned = std::thread::Builder::new()
            .name("tch-scope-checkpoint".into())
            .spawn(move || lock(&theirs).take().map(Job::run));
        match spawned {
            Ok(handle) => self.in_flight = Some(handle),
            Err(_) => self.finished = lock(&slot).take().map(Job::run),
        }
    }

    /// The buffers of a write that has ended, without waiting.
    pub(super) fn reclaim(&mut self) -> Option<Snapshot> {
        if self.in_flight.as_ref().is_some_and(JoinHandle::is_finished) {
            return self.wait();
        }
        self.finished.take().map(|(s, _)| s)
    }

    /// Waits for the write in flight; its buffers back.
    pub(super) fn wait(&mut self) -> Option<Snapshot> {
        self.wait_written().map(|(s, _)| s)
    }

    /// Waits for the write in flight; its buffers back, and whether it
    /// saved.
    pub(super) fn wait_written(&mut self) -> Option<Done> {
        if let Some(handle) = self.in_flight.take() {
            // The job never panics (only fallible calls); if it did, its
            // buffers are gone and the exit saves the live state.
            return handle.join().ok().flatten();
        }
        self.finished.take()
    }
}

/// Writes one boundary; a failure is told to the exit hook (the previous
/// file stays; training goes on).
fn write(
    path: &Path,
    ranks: Option<Ranks>,
    turn: &Turn,
    snapshot: &Snapshot,
    log: &Metrics,
) -> bool {
    match snapshot.save(path, ranks, turn, log) {
        Ok(Replaced::Written | Replaced::Superseded) => true,
        Ok(Replaced::Unsynced(why)) => {
            durable::unsynced("checkpoint", path, &why);
            true
        }
        Err(e) => {
            crate::exit::notify(crate::ExitError::new(
                "checkpoint",
                format!(
                    "could not save the checkpoint {} at step {}: {e} (the previous file stays)",
                    path.display(),
                    snapshot.step
                ),
            ));
            false
        }
    }
}
