//! Step boundaries: the training state copied in memory at each one (into
//! buffers made once), so that every exit inside a `steps` loop saves a
//! whole step, and every `every` steps that copy handed to the background
//! writer.

use std::path::PathBuf;
use std::sync::Arc;

use tch::Tensor;

use super::log::Metrics;
use super::ranks::Ranks;
use super::state::{self, Persist};
use super::writer::{Snapshot, Writer};
use crate::Scope;
use crate::durable::Turn;
use crate::optim::Optimizer;
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
    /// Buffers of an older boundary, to reuse.
    pub spare: Option<Snapshot>,
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
            spare: None,
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
        let mut buffers = self.spare.take().or_else(|| self.latest.take());
        if buffers.is_none() {
            buffers = self.writer.reclaim();
        }
        match take(live, step, log, buffers) {
            Ok(snapshot) => {
                self.broken = false;
                if let Some(old) = self.latest.replace(snapshot) {
                    self.spare = Some(old);
                }
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
        if let Some(done) = self.writer.wait() {
            self.spare.get_or_insert(done);
        }
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

/// Copies the live state at `step` into `buffers` (or new ones): the
/// weights with `copy_`, the optimizer's state with `state_into`, both
/// into the tensors of an earlier boundary.
fn take(
    live: &Live,
    step: i64,
    log: &Metrics,
    buffers: Option<Snapshot>,
) -> Result<Snapshot, String> {
    let _no_grad = crate::NoGrad.enter().map_err(|e| e.to_string())?;
    // A copy of a whole step: a passed deadline must not cut it short.
    let _unchecked = DeadlineExcluded::new();
    let (mut tensors, mut optimizer) = match buffers {
        Some(b) if b.weights == live.weights.len() => (b.tensors, b.optimizer),
        Some(b) => (Vec::new(), b.optimizer),
        None => (Vec::new(), Vec::new()),
    };
    if tensors.len() >= live.weights.len() {
        tensors.truncate(live.weights.len());
        for ((_, dst), (_, src)) in tensors.iter_mut().zip(&live.weights) {
            dst.f_copy_(src).map_err(|e| e.to_string())?;
        }
    } else {
        tensors.clear();
        for (name, src) in &live.weights {
            let copy = src.f_detach_copy().map_err(|e| e.to_string())?;
            tensors.push((name.clone(), copy));
        }
    }
    let step_tensor = Tensor::f_from_slice(&[step]).map_err(|e| e.to_string())?;
    tensors.push((state::STEP.to_owned(), step_tensor));
    match &live.optimizer {
        Some(o) => o.state_into(&mut optimizer),
        None => optimizer.clear(),
    }
    let user = live.user.as_deref();
    tensors.extend(state::capture_rest(user)?);
    Ok(Snapshot {
        step,
        weights: live.weights.len(),
        tensors,
        optimizer,
        metrics: log.lengths(),
    })
}
