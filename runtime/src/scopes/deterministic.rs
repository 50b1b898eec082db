//! `deterministic`: `torch.use_deterministic_algorithms(True, warn_only)`
//! for a scope.
//!
//! The flag is **process-wide** in libtorch: while the scope is open, ops on
//! *every* thread pick deterministic kernels and those without one raise an
//! error (or, with `warn_only`, a warning). Entering saves the previous flag
//! and `warn_only`, leaving puts both back. On CUDA, deterministic cuBLAS
//! also needs `CUBLAS_WORKSPACE_CONFIG=:4096:8` (or `:16:8`) in the
//! environment before CUDA starts, as in PyTorch.

use crate::{Scope, ScopeError, ffi};

unsafe extern "C" {
    fn tch_scope_deterministic_get(enabled: *mut bool, warn_only: *mut bool);
    fn tch_scope_deterministic_set(enabled: bool, warn_only: bool) -> ffi::Status;
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
    ///
    /// ```
    /// let _ = tch_scope::Deterministic::new();
    /// ```
    pub fn new() -> Self {
        Self { warn_only: false }
    }

    /// Warns instead of failing on ops without a deterministic
    /// implementation.
    ///
    /// ```
    /// let _ = tch_scope::Deterministic::new().warn_only(true);
    /// ```
    pub fn warn_only(mut self, warn_only: bool) -> Self {
        self.warn_only = warn_only;
        self
    }
}

/// Puts back the setting found on entry.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct DeterministicGuard {
    enabled: bool,
    warn_only: bool,
    _not_send: crate::PhantomNotSend,
}

fn get() -> (bool, bool) {
    let (mut enabled, mut warn_only) = (false, false);
    // SAFETY: writable out-params; reads the global context's flags.
    unsafe { tch_scope_deterministic_get(&mut enabled, &mut warn_only) };
    (enabled, warn_only)
}

impl Scope for Deterministic {
    type Guard = DeterministicGuard;
    type Error = ScopeError;

    fn enter(&mut self) -> Result<DeterministicGuard, ScopeError> {
        let (enabled, warn_only) = get();
        // SAFETY: plain values; exceptions caught by the shim.
        ffi::check(unsafe { tch_scope_deterministic_set(true, self.warn_only) })
            .map_err(|e| ScopeError::new("deterministic", None, e))?;
        Ok(DeterministicGuard {
            enabled,
            warn_only,
            _not_send: crate::PhantomNotSend::NEW,
        })
    }
}

impl Drop for DeterministicGuard {
    fn drop(&mut self) {
        // SAFETY: plain values; exceptions caught by the shim.
        let status = unsafe { tch_scope_deterministic_set(self.enabled, self.warn_only) };
        if let Err(e) = ffi::check(status) {
            crate::exit::report(
                "deterministic",
                format_args!("could not restore deterministic algorithms: {e}"),
            );
        }
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
