//! `threads(n)`: libtorch's intra-op thread count (`torch.set_num_threads`)
//! for the scope, the old count put back on exit. Like the RNG this is
//! **process-wide** state: another thread's operators see the count too
//! while the scope is open.

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

/// Puts the thread count found on entry back.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct ThreadsGuard {
    previous: i32,
    _not_send: crate::PhantomNotSend,
}

impl Scope for Threads {
    type Guard = ThreadsGuard;
    type Error = ScopeError;

    /// # Errors
    /// `n` is 0 or more than `i32::MAX` (libtorch would throw).
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
        let previous = tch::get_num_threads();
        tch::set_num_threads(n);
        Ok(ThreadsGuard {
            previous,
            _not_send: crate::PhantomNotSend::NEW,
        })
    }
}

impl Drop for ThreadsGuard {
    fn drop(&mut self) {
        tch::set_num_threads(self.previous);
    }
}
