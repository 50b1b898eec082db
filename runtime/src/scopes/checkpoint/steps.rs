//! `for step in tch_scope::steps(n)`: the step loop of the innermost open
//! checkpoint, which knows where a resumed run is and marks each step
//! boundary (documented on [`steps`]).

use std::sync::Arc;

use super::open::{Run, innermost};
use super::progress::Progress;
use crate::stop::{StopDeferred, stop_requested};
use crate::sync::lock;

/// The steps of a training loop, from where the run is to `n` (exclusive):
/// `0..n` on a fresh run, `k..n` after `resume` from a checkpoint saved at
/// step `k`.
///
/// ```
/// use tch_scope::{scoped, steps};
/// let vs = tch::nn::VarStore::new(tch::Device::Cpu);
/// let path = std::env::temp_dir().join(format!("doc-steps-{}.ot", std::process::id()));
/// let first = scoped!(checkpoint(vs, &path, resume) => steps(4).take(2).collect::<Vec<_>>());
/// assert_eq!(first, [0, 1]); // left in step 1: only step 0 completed
/// let rest = scoped!(checkpoint(vs, &path, resume) => steps(4).collect::<Vec<_>>());
/// assert_eq!(rest, [1, 2, 3]);
/// # std::fs::remove_file(&path).unwrap();
/// ```
///
/// It belongs to the innermost checkpoint open on this thread when it is
/// made (as [`log_metric`](crate::log_metric) does). Asking for the next
/// step marks the previous one complete: that is a *step boundary*. At
/// each one the checkpoint holds the training state in memory — the
/// weights, the optimizer's state, the generators' states, the run state,
/// the step — and after every `every` completed steps it writes what it
/// holds to its file on a background thread. Any exit
/// of the checkpoint while the loop runs — a stop, a panic, an `Err`, a
/// `break` — saves the state of the last boundary, so a checkpoint never
/// holds half a step. A loop that runs to `n` hands over: the exit saves
/// the live state then, with the step `n`. One counter per checkpoint: a
/// second `steps(m)` goes on from where the first ended (write one loop of
/// `epochs * steps_per_epoch` and derive the epoch from the step).
///
/// A boundary copies almost nothing. The parameters and the state of the
/// optimizer the checkpoint names (`optimizer = opt`) are *aliased*, and
/// while a boundary holds them the optimizer writes its next update out of
/// place — into another buffer, with the `out=` form of the same operator
/// (bitwise the in-place result) — and swaps it in with `set_data`: the
/// model's tensors, the `VarStore`'s, keep their identity, but their
/// storage (`data_ptr`) changes from step to step, cycling through at most
/// three buffers per tensor (the live one, the last boundary's, the one a
/// background write reads); outside a `steps` loop the updates are in
/// place again. So a view of a parameter made once and kept across steps
/// (`p.narrow(..)` as a layer's weight) would go stale: make views inside
/// the step, as tch's layers do. Variables no optimizer aliases are
/// copied: one that requires no grad (a frozen table, BatchNorm's
/// statistics) only when its version counter or storage changed since its
/// last copy (a frozen table once per checkpoint), a trainable one (which
/// another optimizer may update without a version bump) at every boundary;
/// so are all the weights with no `optimizer = opt`, or with an optimizer
/// of another crate.
///
/// Code of yours that writes a parameter in place after a boundary and
/// before the optimizer's update (`no_grad` `p.copy_(..)`, clipping before
/// `opt.step()`) overwrites what that boundary aliased. The checkpoint
/// sees it through the parameter's version counter: a save of that
/// boundary (at an exit, or a periodic one) is refused — the previous file
/// stays, and the exit hook hears which parameter — and from then on that
/// parameter is copied at each boundary, so later boundaries save exactly.
/// A write after the update in the same step (clipping after
/// `opt.step()`) goes to the new buffer and harms nothing. Writes that
/// bypass the version counter (libtorch's `.data()`, a C++ optimizer such
/// as tch's `nn::Optimizer` stepping the same parameters) are not seen:
/// leave the parameters of a named optimizer to it.
///
/// A stop (SIGINT, SIGTERM, SIGUSR1 while a checkpoint is open) ends the
/// loop at the next step boundary: the step in progress runs whole (its
/// operators are not refused), `next` returns `None`, and the
/// checkpoint's exit saves and ends the process as the signal would have.
///
/// With no checkpoint open, it just counts `0..n`.
///
/// On a terminal it draws a progress bar on stderr, as tqdm does: the step
/// of `n` (a resumed run starts at its step), steps per second, the time
/// left, and the last value of each metric logged; nothing when stderr is
/// no terminal. [`suspend_progress`](crate::suspend_progress) hides it for
/// the program's own output.
///
/// The iterator is not `Send`: it defers stops on its thread's operators.
pub fn steps(n: i64) -> Steps {
    Steps {
        run: innermost(),
        next: 0,
        end: n,
        started: false,
        progress: None,
        _deferred: None,
    }
}

/// The iterator of [`steps`].
#[must_use = "iterate it: `for step in tch_scope::steps(n)`"]
pub struct Steps {
    run: Option<Arc<Run>>,
    /// The step `next` yields next.
    next: i64,
    end: i64,
    started: bool,
    progress: Option<Progress>,
    /// While the loop runs inside a checkpoint: a stop ends it at a step
    /// boundary instead of refusing the step's operators.
    _deferred: Option<StopDeferred>,
}

impl std::fmt::Debug for Steps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Steps")
            .field("next", &self.next)
            .field("end", &self.end)
            .field("checkpoint", &self.run.is_some())
            .finish_non_exhaustive()
    }
}

impl Iterator for Steps {
    type Item = i64;

    fn next(&mut self) -> Option<i64> {
        if let Some(run) = &self.run {
            let mut b = lock(&run.boundaries);
            if b.live.is_none() {
                // Its checkpoint has ended: a plain count from here.
                drop(b);
                self.run = None;
                self._deferred = None;
            } else {
                if self.started {
                    let log = lock(&run.log);
                    b.boundary(self.next, &log, true);
                } else {
                    // The loop's start is a boundary too (no save due).
                    self.next = b.step;
                    let log = lock(&run.log);
                    b.boundary(self.next, &log, false);
                    self._deferred = Some(StopDeferred::new());
                }
                if self.next >= self.end {
                    b.finished();
                }
            }
        }
        self.started = true;
        let progress = self
            .progress
            .get_or_insert_with(|| Progress::new(self.next, self.end));
        if progress.drawn() {
            match &self.run {
                Some(run) => progress.update(self.next, Some(&lock(&run.log))),
                None => progress.update(self.next, None),
            }
        }
        if self.next >= self.end || (self.run.is_some() && stop_requested()) {
            self._deferred = None;
            self.progress = None;
            return None;
        }
        let step = self.next;
        self.next += 1;
        Some(step)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.end - self.next).unwrap_or(0);
        (0, Some(left))
    }
}
