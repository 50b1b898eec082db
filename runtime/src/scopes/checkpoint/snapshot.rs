//! Step boundaries: the training state held in memory at each one, so
//! that every exit inside a `steps` loop saves a whole step, and every
//! `every` steps handed to the background writer. The optimizer's
//! parameters and state are aliased, copy-on-write (`optim::Optimizer::
//! hold`); the other variables are copied when they changed (`copies`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use tch::Tensor;

use super::copies::Copies;
use super::log::Metrics;
use super::ranks::Ranks;
use super::state::{self, Persist};
use super::writer::{Snapshot, Writer};
use crate::Scope;
use crate::durable::Turn;
use crate::optim::{HeldParam, Hold, Optimizer};
use crate::scopes::deadline::DeadlineExcluded;

/// What a boundary reads of the live run: set while the guard lives.
pub(super) struct Live {
    /// The VarStore's variables (shallow: the same storage).
    pub weights: Vec<(String, Tensor)>,
    /// Handles shared with the optimizer and the run state: nothing
    /// here can outlive what it reads.
    pub optimizer: Option<Arc<dyn Optimizer>>,
    pub user: Option<Arc<dyn Persist>>,
    pub path: PathBuf,
    /// The path as the order of the saves knows it (`durable::Turn`).
    pub destination: PathBuf,
    /// Saved in parts, one per rank (see `ranks`).
    pub ranks: Option<Ranks>,
}

/// Where a checkpoint's step loop is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// No loop yet, or one that ran to its end: exits save the live state.
    Outside,
    /// In a loop (or one left by a stop, a `break` or a failure): exits
    /// save the last boundary.
    Inside,
}

/// A checkpoint's step boundaries, shared with the `steps` loop.
pub(super) struct Boundaries {
    pub live: Option<Live>,
    /// Steps completed (the next step to run).
    pub step: i64,
    pub phase: Phase,
    /// Save after every `every` completed steps.
    pub every: Option<i64>,
    /// The last boundary, unless it is in the writer (then `None`).
    pub latest: Option<Snapshot>,
    /// The copies of the variables no optimizer aliases.
    pub copies: Copies,
    pub writer: Writer,
    /// A boundary could not be copied: exits save the live state.
    pub broken: bool,
}

impl Boundaries {
    pub(super) fn new(live: Live, step: i64, every: Option<i64>) -> Self {
        Self {
            live: Some(live),
            step,
            phase: Phase::Outside,
            every,
            latest: None,
            copies: Copies::default(),
            writer: Writer::default(),
            broken: false,
        }
    }

    /// Steps completed up to `step`: copies the state, and starts a
    /// periodic save when one is due (`periodic`). A failed copy is told
    /// to the exit hook; the exit then saves the live state.
    pub(super) fn boundary(&mut self, step: i64, log: &Metrics, periodic: bool) {
        self.step = step;
        self.phase = Phase::Inside;
        let Some(live) = &self.live else { return };
        // A write that ended lets go of what it held.
        drop(self.writer.reclaim());
        // Taken before the last boundary is let go: while it holds the
        // storages, the optimizer can tell whether they were written.
        match take(live, step, log, &mut self.copies) {
            Ok(snapshot) => {
                self.broken = false;
                self.latest = Some(snapshot);
            }
            Err(e) => {
                self.broken = true;
                self.latest = None;
                crate::exit::notify(crate::ExitError::new(
                    "checkpoint",
                    format!("could not copy the training state at step {step}: {e}"),
                ));
                return;
            }
        }
        let due = self.every.is_some_and(|k| step % k == 0);
        if periodic && due {
            self.save_in_background(log);
        }
    }

    /// Hands the last boundary to the writer (after the write in flight,
    /// if any, ended: at most one at a time).
    fn save_in_background(&mut self, log: &Metrics) {
        let (Some(live), Some(snapshot)) = (&self.live, self.latest.take()) else {
            return;
        };
        drop(self.writer.wait());
        let metrics = log.truncated(&snapshot.metrics);
        // The turn now, on this thread: a later exit save's turn is later.
        let turn = Turn::take(live.destination.clone());
        self.writer
            .start(live.path.clone(), live.ranks, turn, snapshot, metrics);
    }

    /// The last boundary for the exit save, after the write in flight
    /// ended: `None` when that write saved it already (or none was taken).
    pub(super) fn last(&mut self) -> Option<Snapshot> {
        let written = self.writer.wait_written();
        match (self.latest.take(), written) {
            (Some(s), _) => Some(s),
            (None, Some((s, true))) => {
                // Saved by the writer, and nothing since.
                drop(s);
                None
            }
            (None, Some((s, false))) => Some(s),
            (None, None) => None,
        }
    }

    /// The loop ran to its end: exits save the live state again.
    pub(super) fn finished(&mut self) {
        self.phase = Phase::Outside;
    }

    /// Whether exits save the last boundary rather than the live state.
    pub(super) fn inside(&self) -> bool {
        self.phase == Phase::Inside && !self.broken
    }
}

/// The live state at `step`: the optimizer's parameters and state
/// aliased (it writes them out of place until the snapshot is dropped),
/// the other variables copied when they changed, the rest (the step, the
/// generators, the run state) made afresh. An optimizer that can't alias
/// has its weights copied and its `state` taken.
fn take(live: &Live, step: i64, log: &Metrics, copies: &mut Copies) -> Result<Snapshot, String> {
    let _no_grad = crate::NoGrad.enter().map_err(|e| e.to_string())?;
    // A whole step's state: a passed deadline must not cut it short.
    let _unchecked = DeadlineExcluded::new();
    let held = match &live.optimizer {
        Some(o) => o.hold().map_err(|e| e.to_string())?,
        None => None,
    };
    let aliases: HashMap<&str, &HeldParam> = held
        .iter()
        .flat_map(|h| h.params.iter().map(|(n, p)| (n.as_str(), p)))
        .collect();
    let copied = Hold::new(Vec::new());
    let mut tensors = Vec::with_capacity(live.weights.len() + 4);
    let mut checks = Vec::new();
    for (name, var) in &live.weights {
        let aliased = match aliases.get(name.as_str()) {
            // The optimizer's own tensor (the same storage now).
            Some(HeldParam::Alias { index, alias })
                if alias.data_ptr() == var.data_ptr() && alias.size() == var.size() =>
            {
                checks.push((name.clone(), alias.shallow_clone(), *index));
                Some(alias.shallow_clone())
            }
            _ => None,
        };
        let t = match aliased {
            Some(t) => t,
            None => copies.take(name, var, &copied).map_err(|e| e.to_string())?,
        };
        tensors.push((name.clone(), t));
    }
    let step_tensor = Tensor::f_from_slice(&[step]).map_err(|e| e.to_string())?;
    tensors.push((state::STEP.to_owned(), step_tensor));
    let user = live.user.as_deref();
    tensors.extend(state::capture_rest(user)?);
    let (optimizer, hold) = match (held, &live.optimizer) {
        (Some(h), _) => (h.state, Some(h.hold)),
        (None, Some(o)) => (o.state(), None),
        (None, None) => (Vec::new(), None),
    };
    Ok(Snapshot {
        step,
        tensors,
        optimizer,
        metrics: log.lengths(),
        checks,
        hold,
        _copied: copied,
    })
}
