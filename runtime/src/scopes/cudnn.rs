//! `cudnn(enabled = .., benchmark = .., deterministic = .., allow_tf32 = ..)`:
//! `torch.backends.cudnn.flags(...)` for a scope. **Process-wide** flags.
//! Unlike Python's `flags()`, which sets every flag (an argument left out
//! takes its default, so `flags()` alone turns cuDNN off), only the flags
//! written change; the guard puts back exactly those.

use crate::{Scope, ScopeError, ffi};

unsafe extern "C" {
    fn tch_scope_cudnn_get(out: *mut bool);
    fn tch_scope_cudnn_set(set: *const bool, value: *const bool) -> ffi::Status;
}

/// cuDNN's flags, as [`cudnn_flags`] reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudnnFlags {
    /// `torch.backends.cudnn.enabled`: cuDNN may be used at all.
    pub enabled: bool,
    /// `torch.backends.cudnn.benchmark`: pick convolution algorithms by
    /// timing them.
    pub benchmark: bool,
    /// `torch.backends.cudnn.deterministic`: only deterministic algorithms.
    pub deterministic: bool,
    /// `torch.backends.cudnn.allow_tf32`: TF32 in convolutions.
    pub allow_tf32: bool,
}

impl CudnnFlags {
    fn to_array(self) -> [bool; 4] {
        [
            self.enabled,
            self.benchmark,
            self.deterministic,
            self.allow_tf32,
        ]
    }
}

/// The flags now (`torch.backends.cudnn.enabled`, `.benchmark`,
/// `.deterministic`, `.allow_tf32`).
///
/// ```
/// let f = tch_scope::cudnn_flags();
/// assert!(f.enabled && !f.benchmark && !f.deterministic && f.allow_tf32); // libtorch's defaults
/// ```
pub fn cudnn_flags() -> CudnnFlags {
    let mut out = [false; 4];
    // SAFETY: room for the 4 flags the shim writes; it cannot fail.
    unsafe { tch_scope_cudnn_get(out.as_mut_ptr()) };
    let [enabled, benchmark, deterministic, allow_tf32] = out;
    CudnnFlags {
        enabled,
        benchmark,
        deterministic,
        allow_tf32,
    }
}

/// Sets the cuDNN flags given, for the scope; the others keep their value.
///
/// ```
/// use tch_scope::{Cudnn, Scope, cudnn_flags};
/// let before = cudnn_flags();
/// let g = Cudnn::new().benchmark(true).deterministic(true).enter().unwrap();
/// assert!(cudnn_flags().benchmark && cudnn_flags().deterministic);
/// assert_eq!(cudnn_flags().enabled, before.enabled);
/// drop(g);
/// assert_eq!(cudnn_flags(), before);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Cudnn {
    set: [Option<bool>; 4],
}

impl Cudnn {
    /// Changes nothing until a flag is given.
    ///
    /// ```
    /// let _ = tch_scope::Cudnn::new().enabled(false);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// `enabled`: whether cuDNN may be used.
    ///
    /// ```
    /// let _ = tch_scope::Cudnn::new().enabled(false);
    /// ```
    pub fn enabled(mut self, on: bool) -> Self {
        self.set[0] = Some(on);
        self
    }

    /// `benchmark`: time the convolution algorithms and keep the fastest.
    ///
    /// ```
    /// let _ = tch_scope::Cudnn::new().benchmark(true);
    /// ```
    pub fn benchmark(mut self, on: bool) -> Self {
        self.set[1] = Some(on);
        self
    }

    /// `deterministic`: only deterministic convolution algorithms.
    ///
    /// ```
    /// let _ = tch_scope::Cudnn::new().deterministic(true);
    /// ```
    pub fn deterministic(mut self, on: bool) -> Self {
        self.set[2] = Some(on);
        self
    }

    /// `allow_tf32`: TF32 in cuDNN convolutions.
    ///
    /// ```
    /// let _ = tch_scope::Cudnn::new().allow_tf32(false);
    /// ```
    pub fn allow_tf32(mut self, on: bool) -> Self {
        self.set[3] = Some(on);
        self
    }
}

/// Puts back the flags the scope changed.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct CudnnGuard {
    changed: [bool; 4],
    previous: [bool; 4],
    _not_send: crate::PhantomNotSend,
}

fn set(which: &[bool; 4], value: &[bool; 4]) -> Result<(), String> {
    // SAFETY: two arrays of the 4 flags; exceptions caught by the shim.
    ffi::check(unsafe { tch_scope_cudnn_set(which.as_ptr(), value.as_ptr()) })
}

impl Scope for Cudnn {
    type Guard = CudnnGuard;
    type Error = ScopeError;

    /// # Errors
    /// libtorch refused a flag (`allow_tf32` where PyTorch's legacy and
    /// per-backend precision APIs were mixed).
    fn enter(&mut self) -> Result<CudnnGuard, ScopeError> {
        let previous = cudnn_flags().to_array();
        let changed = self.set.map(|v| v.is_some());
        let value = self.set.map(|v| v.unwrap_or(false));
        set(&changed, &value).map_err(|e| ScopeError::new("cudnn", None, e))?;
        Ok(CudnnGuard {
            changed,
            previous,
            _not_send: crate::PhantomNotSend::NEW,
        })
    }
}

impl Drop for CudnnGuard {
    fn drop(&mut self) {
        if let Err(e) = set(&self.changed, &self.previous) {
            crate::exit::report(
                "cudnn",
                format_args!("could not restore the cuDNN flags: {e}"),
            );
        }
    }
}
