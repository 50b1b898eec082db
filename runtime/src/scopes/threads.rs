//! `threads(n)`: libtorch's intra-op thread count (`torch.set_num_threads`)
//! for the scope, the old count put back on exit. Like the RNG this is
//! **process-wide** state: another thread's operators see the count too
//! while the scope is open.

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
#[derive(Debug, Clone, Copy)]
pub struct Threads(pub usize);

/// Holds the count; the last guard of all those open (on any thread, in
/// any order) puts back the count found before the first. `Send` (see
/// [process-wide words](crate#process-wide-words)); see the
/// [module docs](self) for the per-thread part of the count.
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
