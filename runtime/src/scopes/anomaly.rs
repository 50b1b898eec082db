//! `detect_anomaly`: `torch.autograd.detect_anomaly(check_nan)` /
//! `set_detect_anomaly`.
//!
//! Anomaly mode is a **process-wide** flag in libtorch: while the scope is
//! open, backward passes on *every* thread record forward tracebacks and
//! (with `check_nan`) fail on NaN gradients, at a large cost in speed.
//! Scopes on many threads share the mode: the first saves the previous
//! flag and `check_nan`, the last to end puts both back, in whatever order
//! they end; one asking for another setting while another thread has one
//! open is refused (see [process-wide words](crate#process-wide-words)).

use crate::process_wide::{self, Fixed, Held, Registry};
use crate::{Scope, ScopeError};

unsafe extern "C" {
    fn tch_scope_anomaly_get(enabled: *mut bool, check_nan: *mut bool);
    fn tch_scope_anomaly_set(enabled: bool, check_nan: bool);
    fn tch_scope_anomaly_swap(enabled: bool, check_nan: bool) -> u32;
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
    pub fn new() -> Self {
        Self {
            enabled: true,
            check_nan: true,
        }
    }

    /// Whether a NaN produced in backward is an error.
    pub fn check_nan(mut self, check_nan: bool) -> Self {
        self.check_nan = check_nan;
        self
    }

    /// `torch.autograd.set_detect_anomaly(mode)`: `false` turns anomaly
    /// detection off for the scope.
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

/// Holds the mode; the last guard of all those open (on any thread, in any
/// order) puts back the mode found before the first. Not `Send`: it is
/// its thread's hold (see [process-wide words](crate#process-wide-words)).
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct AnomalyGuard {
    held: Held<Setting, Fixed>,
}

fn get() -> (bool, bool) {
    let (mut enabled, mut check_nan) = (false, false);
    // SAFETY: writable out-params; reads two static bools.
    unsafe { tch_scope_anomaly_get(&mut enabled, &mut check_nan) };
    (enabled, check_nan)
}

/// Anomaly mode: a scope's value is `(enabled, check_nan)`.
pub(crate) struct Setting;

static REGISTRY: Registry<Setting> = Registry::new();

impl process_wide::Setting for Setting {
    type Value = (bool, bool);
    type Saved = (bool, bool);
    const WORD: &'static str = "detect_anomaly";

    #[inline]
    fn registry() -> &'static Registry<Self> {
        &REGISTRY
    }

    fn same(a: &(bool, bool), b: &(bool, bool)) -> bool {
        // Off is off, whatever `check_nan` says.
        a.0 == b.0 && (!a.0 || a.1 == b.1)
    }

    fn describe(&(enabled, check_nan): &(bool, bool)) -> String {
        match (enabled, check_nan) {
            (false, _) => "detect_anomaly(enabled = false)".into(),
            (true, true) => "detect_anomaly".into(),
            (true, false) => "detect_anomaly(check_nan = false)".into(),
        }
    }

    fn save() -> Result<(bool, bool), String> {
        Ok(get())
    }

    #[inline]
    fn set(&(enabled, check_nan): &(bool, bool)) -> Result<(), String> {
        // SAFETY: sets two static bools.
        unsafe { tch_scope_anomaly_set(enabled, check_nan) };
        Ok(())
    }

    #[inline]
    fn restore(saved: &(bool, bool)) -> Result<(), String> {
        Self::set(saved)
    }

    #[inline]
    fn code(&(enabled, check_nan): &(bool, bool)) -> Option<u8> {
        // Both flags, even off: `set` writes `check_nan` either way.
        Some(u8::from(enabled) | u8::from(check_nan) << 1)
    }

    #[inline]
    fn swap(&(enabled, check_nan): &(bool, bool)) -> Result<(bool, bool), String> {
        // SAFETY: reads and sets two static bools.
        let was = unsafe { tch_scope_anomaly_swap(enabled, check_nan) };
        Ok((was & 1 != 0, was & 2 != 0))
    }
}

impl Scope for DetectAnomaly {
    type Guard = AnomalyGuard;
    type Error = ScopeError;

    /// Setting the mode cannot fail, so neither can leaving: the success
    /// path need not look for exit errors.
    const EXIT_CAN_FAIL: bool = false;

    /// # Errors
    /// Another thread or task has `detect_anomaly` open with another
    /// setting.
    #[inline]
    fn enter(&mut self) -> Result<AnomalyGuard, ScopeError> {
        Held::enter((self.enabled, self.check_nan), Fixed).map(|held| AnomalyGuard { held })
    }

    fn suspend(guard: &mut AnomalyGuard) {
        guard.held.suspend();
    }

    fn resume(guard: &mut AnomalyGuard) {
        guard.held.resume();
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

// SAFETY: its thread-bound part is its registry entry, which `Spanned`
// steps off and onto threads around each poll (`suspend` / `resume`); the
// rest is plain data.
unsafe impl crate::process_wide::MovesWithTask for AnomalyGuard {}
