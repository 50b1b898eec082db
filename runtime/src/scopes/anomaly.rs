//! `detect_anomaly`: `torch.autograd.detect_anomaly(check_nan)` /
//! `set_detect_anomaly`.
//!
//! Anomaly mode is a **process-wide** flag in libtorch: while the scope is
//! open, backward passes on *every* thread record forward tracebacks and
//! (with `check_nan`) fail on NaN gradients, at a large cost in speed.
//! Entering saves the previous flag and `check_nan`, leaving puts both back.

use std::convert::Infallible;

use crate::Scope;

unsafe extern "C" {
    fn tch_scope_anomaly_get(enabled: *mut bool, check_nan: *mut bool);
    fn tch_scope_anomaly_set(enabled: bool, check_nan: bool);
}

/// Anomaly detection on for the scope; `check_nan` (default `true`) makes
/// a backward pass that produces NaN fail.
///
/// ```
/// use tch_scope::{DetectAnomaly, Scope, anomaly_mode};
/// let g = DetectAnomaly::new().check_nan(false).enter().unwrap();
/// assert_eq!(anomaly_mode(), Some(false));
/// drop(g);
/// assert_eq!(anomaly_mode(), None);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct DetectAnomaly {
    enabled: bool,
    check_nan: bool,
}

impl DetectAnomaly {
    /// `torch.autograd.detect_anomaly()`: on, checking for NaN.
    ///
    /// ```
    /// let _ = tch_scope::DetectAnomaly::new();
    /// ```
    pub fn new() -> Self {
        Self {
            enabled: true,
            check_nan: true,
        }
    }

    /// Whether a NaN produced in backward is an error.
    ///
    /// ```
    /// let _ = tch_scope::DetectAnomaly::new().check_nan(false);
    /// ```
    pub fn check_nan(mut self, check_nan: bool) -> Self {
        self.check_nan = check_nan;
        self
    }

    /// `torch.autograd.set_detect_anomaly(mode)`: `false` turns anomaly
    /// detection off for the scope.
    ///
    /// ```
    /// let _ = tch_scope::DetectAnomaly::new().enabled(false);
    /// ```
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }
}

impl Default for DetectAnomaly {
    fn default() -> Self {
        Self::new()
    }
}

/// Puts back the anomaly mode found on entry.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct AnomalyGuard {
    enabled: bool,
    check_nan: bool,
    _not_send: crate::PhantomNotSend,
}

fn get() -> (bool, bool) {
    let (mut enabled, mut check_nan) = (false, false);
    // SAFETY: writable out-params; reads two static bools.
    unsafe { tch_scope_anomaly_get(&mut enabled, &mut check_nan) };
    (enabled, check_nan)
}

impl Scope for DetectAnomaly {
    type Guard = AnomalyGuard;
    type Error = Infallible;

    fn enter(&mut self) -> Result<AnomalyGuard, Infallible> {
        let (enabled, check_nan) = get();
        // SAFETY: sets two static bools.
        unsafe { tch_scope_anomaly_set(self.enabled, self.check_nan) };
        Ok(AnomalyGuard {
            enabled,
            check_nan,
            _not_send: crate::PhantomNotSend::NEW,
        })
    }
}

impl Drop for AnomalyGuard {
    fn drop(&mut self) {
        // SAFETY: sets two static bools.
        unsafe { tch_scope_anomaly_set(self.enabled, self.check_nan) };
    }
}

/// `None` when anomaly detection is off, else `Some(check_nan)`
/// (`torch.is_anomaly_enabled()`, `torch.is_anomaly_check_nan_enabled()`).
///
/// ```
/// assert_eq!(tch_scope::anomaly_mode(), None);
/// ```
pub fn anomaly_mode() -> Option<bool> {
    let (enabled, check_nan) = get();
    enabled.then_some(check_nan)
}
