//! [`Task`]: a process-wide scope as the macros enter it (documented on
//! the type).

pub use crate::process_wide::MovesWithTask;
use crate::{Outcome, Scope};

/// A scope whose guard may move with the task that holds it.
///
/// The guards of process-wide words (`seed`, `deterministic`, `eval(model)`,
/// …) are `!Send`: a registry entry is active on the thread that entered
/// it, and a scope entered later on that thread nests in it. So is a
/// `checkpoint`'s: its metric log is the thread's innermost open log. A guard moved
/// to another thread by hand would still count as its first thread's, and
/// that thread's next scope would nest in a scope it no longer holds.
///
/// A future spanned by such a scope must still move between threads: the
/// macros' [`Spanned`](crate::Spanned) steps its guard off the thread when
/// a poll suspends ([`Scope::suspend`]) and onto the next poll's thread
/// ([`Scope::resume`]), so the holder follows the guard. The macros wrap
/// every process-wide word (and `checkpoint`) in `Task`, whose guard is `Send` when the word's
/// guard is [`MovesWithTask`]. A synchronous expansion's guard is a hidden
/// local of one stack frame, so it never moves.
#[derive(Debug, Clone, Copy)]
pub struct Task<S>(pub S);

/// [`Task`]'s guard: the scope's own guard, `Send` for the process-wide
/// words.
#[derive(Debug)]
#[must_use = "a scope guard restores the state when dropped"]
pub struct TaskGuard<G>(G);

// SAFETY: see `MovesWithTask`; only the macros make a `TaskGuard`, and only
// `Spanned` moves one, around `suspend` / `resume`.
unsafe impl<G: MovesWithTask> Send for TaskGuard<G> {}

impl<S: Scope> Scope for Task<S> {
    type Guard = TaskGuard<S::Guard>;
    type Error = S::Error;
    const EXIT_CAN_FAIL: bool = S::EXIT_CAN_FAIL;

    #[inline]
    fn enter(&mut self) -> Result<Self::Guard, S::Error> {
        self.0.enter().map(TaskGuard)
    }

    #[inline]
    fn exit(guard: &mut Self::Guard, outcome: Outcome) {
        S::exit(&mut guard.0, outcome);
    }

    #[inline]
    fn suspend(guard: &mut Self::Guard) {
        S::suspend(&mut guard.0);
    }

    #[inline]
    fn resume(guard: &mut Self::Guard) {
        S::resume(&mut guard.0);
    }
}
