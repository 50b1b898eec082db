//! `threads(n)`: libtorch's intra-op thread count for the scope
//! (documented on [`Threads`], where the rustdoc shows it).

use crate::process_wide::{self, Held, Registry};
use crate::{Scope, ScopeError};

/// `torch.set_num_threads(n)` for the scope, restored on exit.
///
/// ```
/// use tch_scope::{Scope, Threads};
/// let before = tch::get_num_threads();
/// let g = Threads(1).enter().unwrap();
/// assert_eq!(tch::get_num_threads(), 1);
/// drop(g);
/// assert_eq!(tch::get_num_threads(), before);
/// assert!(Threads(0).enter().is_err());
/// ```
///
/// for the scope, the old count put back when the last overlapping scope
/// ends.
///
/// With libtorch's OpenMP build the count is only partly process-wide:
/// `at::set_num_threads` stores a process value *and* sets the calling
/// thread's OpenMP count, and every other thread copies the process value
/// at its first parallel op, then keeps its own. Measured
/// (`tests/concurrent.rs`, `threads_reaches_new_threads_and_the_entering_one_only`):
///
/// - the thread that enters the scope, and a thread that runs its first op
///   while the scope is open, use `n`;
/// - a thread that ran an op before the scope opened keeps its count: the
///   scope does not reach it;
/// - at the end, the process value and the count of the thread that leaves
///   the last scope are put back, so a thread born after uses the old count.
///
/// What cannot be put back: a thread that first ran an op inside the scope
/// keeps `n` for its life, and when the last scope ends on another thread
/// than the first entered (scopes of two threads sharing `n`, or a task
/// that moved), the entering thread keeps `n` too. libtorch offers no way
/// to set another thread's OpenMP count. For a pool of worker threads, set
/// the count once at start-up, or enter `threads(n)` on each worker.
#[derive(Debug, Clone, Copy)]
pub struct Threads(pub usize);

/// Holds the count; the last guard of all those open (on any thread, in
/// any order) puts back the count found before the first. Not `Send` (see
/// [process-wide words](crate#process-wide-words)); see
/// [`Threads`] for the per-thread part of the count.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct ThreadsGuard {
    held: Held<Setting>,
}

/// `at::set_num_threads`: a scope's value is its count.
pub(crate) struct Setting;

static REGISTRY: Registry<Setting> = Registry::new();

impl process_wide::Setting for Setting {
    type Value = i32;
    type Saved = i32;

    fn registry() -> &'static Registry<Self> {
        &REGISTRY
    }

    fn same(a: &i32, b: &i32) -> bool {
        a == b
    }

    fn describe(n: &i32) -> String {
        format!("threads({n})")
    }

    fn save() -> Result<i32, String> {
        Ok(tch::get_num_threads())
    }

    fn set(n: &i32) -> Result<(), String> {
        tch::set_num_threads(*n);
        Ok(())
    }

    fn restore(n: &i32) -> Result<(), String> {
        Self::set(n)
    }
}

impl Scope for Threads {
    type Guard = ThreadsGuard;
    type Error = ScopeError;

    /// # Errors
    /// `n` is 0 or more than `i32::MAX` (libtorch would throw), or another
    /// thread or task has `threads` open with another count.
    fn enter(&mut self) -> Result<ThreadsGuard, ScopeError> {
        let n = i32::try_from(self.0)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                ScopeError::new(
                    format!("threads({})", self.0),
                    None,
                    "the intra-op thread count must be between 1 and 2^31 - 1",
                )
            })?;
        Held::enter(n, "threads").map(|held| ThreadsGuard { held })
    }

    fn suspend(guard: &mut ThreadsGuard) {
        guard.held.suspend();
    }

    fn resume(guard: &mut ThreadsGuard) {
        guard.held.resume();
    }
}

// SAFETY: its thread-bound part is its registry entry, which `Spanned`
// steps off and onto threads around each poll (`suspend` / `resume`); the
// rest is plain data.
unsafe impl crate::process_wide::MovesWithTask for ThreadsGuard {}
