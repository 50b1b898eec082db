//! `deterministic`: `torch.use_deterministic_algorithms(True, warn_only)`
//! for a scope.
//!
//! The flag is **process-wide** in libtorch: while the scope is open, ops on
//! *every* thread pick deterministic kernels and those without one raise an
//! error (or, with `warn_only`, a warning). Scopes on many threads share
//! the flag: the first saves the previous flag and `warn_only`, the last
//! to end puts both back, in whatever order they end; one asking for
//! another `warn_only` while another thread has the flag is refused (see
//! [process-wide words](crate#process-wide-words)). On CUDA, deterministic cuBLAS
//! also needs `CUBLAS_WORKSPACE_CONFIG=:4096:8` (or `:16:8`) in the
//! environment before CUDA starts, as in PyTorch.

use crate::process_wide::{self, Fixed, Held, Registry};
use crate::{Scope, ScopeError, ffi};

unsafe extern "C" {
    fn tch_scope_deterministic_get(enabled: *mut bool, warn_only: *mut bool);
    fn tch_scope_deterministic_set(enabled: bool, warn_only: bool) -> ffi::Status;
    fn tch_scope_deterministic_swap(enabled: bool, warn_only: bool, was: *mut u32) -> ffi::Status;
}

/// Deterministic algorithms on for the scope (`warn_only` defaults to
/// `false`).
///
/// ```
/// use tch_scope::{Deterministic, Scope, deterministic_mode};
/// let g = Deterministic::new().warn_only(true).enter().unwrap();
/// assert_eq!(deterministic_mode(), Some(true));
/// drop(g);
/// assert_eq!(deterministic_mode(), None);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Deterministic {
    warn_only: bool,
}

impl Deterministic {
    /// Errors on ops without a deterministic implementation.
    pub fn new() -> Self {
        Self { warn_only: false }
    }

    /// Warns instead of failing on ops without a deterministic
    /// implementation.
    pub fn warn_only(mut self, warn_only: bool) -> Self {
        self.warn_only = warn_only;
        self
    }
}

/// Holds the setting; the last guard of all those open (on any thread, in
/// any order) puts back the setting found before the first. Not `Send`:
/// it is its thread's hold (see
/// [process-wide words](crate#process-wide-words)).
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct DeterministicGuard {
    held: Held<Setting, Fixed>,
}

fn get() -> (bool, bool) {
    let (mut enabled, mut warn_only) = (false, false);
    // SAFETY: writable out-params; reads the global context's flags.
    unsafe { tch_scope_deterministic_get(&mut enabled, &mut warn_only) };
    (enabled, warn_only)
}

#[inline]
fn set(enabled: bool, warn_only: bool) -> Result<(), String> {
    // SAFETY: plain values; exceptions caught by the shim.
    ffi::check(unsafe { tch_scope_deterministic_set(enabled, warn_only) })
}

/// `use_deterministic_algorithms`: a scope's value is its `warn_only`.
pub(crate) struct Setting;

static REGISTRY: Registry<Setting> = Registry::new();

impl process_wide::Setting for Setting {
    type Value = bool;
    type Saved = (bool, bool);
    const WORD: &'static str = "deterministic";

    #[inline]
    fn registry() -> &'static Registry<Self> {
        &REGISTRY
    }

    fn same(a: &bool, b: &bool) -> bool {
        a == b
    }

    fn describe(warn_only: &bool) -> String {
        if *warn_only {
            "deterministic(warn_only)".into()
        } else {
            "deterministic".into()
        }
    }

    fn save() -> Result<(bool, bool), String> {
        Ok(get())
    }

    #[inline]
    fn set(warn_only: &bool) -> Result<(), String> {
        set(true, *warn_only)
    }

    #[inline]
    fn restore(&(enabled, warn_only): &(bool, bool)) -> Result<(), String> {
        set(enabled, warn_only)
    }

    #[inline]
    fn code(warn_only: &bool) -> Option<u8> {
        Some(u8::from(*warn_only))
    }

    #[inline]
    fn swap(warn_only: &bool) -> Result<(bool, bool), String> {
        let mut was = 0;
        // SAFETY: a writable out-param; exceptions caught by the shim.
        ffi::check(unsafe { tch_scope_deterministic_swap(true, *warn_only, &mut was) })?;
        Ok((was & 1 != 0, was & 2 != 0))
    }
}

impl Scope for Deterministic {
    type Guard = DeterministicGuard;
    type Error = ScopeError;

    /// # Errors
    /// Another thread or task has `deterministic` open with another
    /// `warn_only`, or libtorch refused.
    #[inline]
    fn enter(&mut self) -> Result<DeterministicGuard, ScopeError> {
        Held::enter(self.warn_only, Fixed).map(|held| DeterministicGuard { held })
    }

    fn suspend(guard: &mut DeterministicGuard) {
        guard.held.suspend();
    }

    fn resume(guard: &mut DeterministicGuard) {
        guard.held.resume();
    }
}

/// `None` when deterministic algorithms are off, else `Some(warn_only)`
/// (`torch.are_deterministic_algorithms_enabled()`,
/// `torch.is_deterministic_algorithms_warn_only_enabled()`).
///
/// ```
/// assert_eq!(tch_scope::deterministic_mode(), None);
/// ```
pub fn deterministic_mode() -> Option<bool> {
    let (enabled, warn_only) = get();
    enabled.then_some(warn_only)
}

// SAFETY: its thread-bound part is its registry entry, which `Spanned`
// steps off and onto threads around each poll (`suspend` / `resume`); the
// rest is plain data.
unsafe impl crate::process_wide::MovesWithTask for DeterministicGuard {}
