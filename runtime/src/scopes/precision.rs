//! `matmul_precision(..)` and `tf32(flag)`: the precision of float32 matrix
//! multiplications (`torch.set_float32_matmul_precision`,
//! `torch.backends.cuda.matmul.allow_tf32`). In libtorch these are one
//! setting seen two ways — `"high"` and `"medium"` allow TF32, `"highest"`
//! does not — and **process-wide**: every thread's matmuls see it while the
//! scope is open. Both guards save the whole matmul state (the legacy
//! setting and the per-backend matmul entries it overwrites) and put it
//! back exactly.

use crate::{Scope, ScopeError, ffi};

unsafe extern "C" {
    fn tch_scope_matmul_save(out: *mut i32) -> ffi::Status;
    fn tch_scope_matmul_restore(saved: *const i32) -> ffi::Status;
    fn tch_scope_matmul_set_precision(name: *const std::ffi::c_char) -> ffi::Status;
    fn tch_scope_matmul_set_tf32(allow: bool) -> ffi::Status;
    fn tch_scope_matmul_precision_get() -> i32;
    fn tch_scope_matmul_allow_tf32_get() -> bool;
}

/// The names libtorch accepts, in the order of its enum.
const PRECISIONS: [&str; 3] = ["highest", "high", "medium"];
const PRECISIONS_C: [&std::ffi::CStr; 3] = [c"highest", c"high", c"medium"];

/// `torch.set_float32_matmul_precision(name)` for the scope: `"highest"`
/// (float32 throughout), `"high"` (TF32 allowed) or `"medium"` (bfloat16
/// allowed). Another name is a [`ScopeError`] on entry.
///
/// ```
/// use tch_scope::{MatmulPrecision, Scope, allow_tf32, matmul_precision};
/// let g = MatmulPrecision::new("high").enter().unwrap();
/// assert_eq!((matmul_precision(), allow_tf32()), ("high", true));
/// drop(g);
/// assert_eq!(matmul_precision(), "highest");
/// assert!(MatmulPrecision::new("low").enter().is_err());
/// ```
#[derive(Debug, Clone)]
pub struct MatmulPrecision {
    /// Index into [`PRECISIONS`], or the name as written.
    precision: Result<usize, String>,
}

impl MatmulPrecision {
    /// The precision named `name` (checked on entry).
    ///
    /// ```
    /// let _ = tch_scope::MatmulPrecision::new("medium");
    /// ```
    pub fn new(name: impl AsRef<str>) -> Self {
        let name = name.as_ref();
        Self {
            precision: PRECISIONS
                .iter()
                .position(|&p| p == name)
                .ok_or_else(|| name.to_owned()),
        }
    }
}

/// `torch.backends.cuda.matmul.allow_tf32 = flag` for the scope (cuBLAS may
/// use TF32 for float32 matmuls); the same setting as
/// [`MatmulPrecision`]: `true` is `"high"`, `false` is `"highest"`.
///
/// ```
/// use tch_scope::{Scope, Tf32, allow_tf32};
/// let g = Tf32(true).enter().unwrap();
/// assert!(allow_tf32());
/// drop(g);
/// assert!(!allow_tf32());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Tf32(pub bool);

/// Puts the matmul precision found on entry back.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct MatmulPrecisionGuard {
    saved: [i32; 3],
    _not_send: crate::PhantomNotSend,
}

/// Saves the state, then runs `set`; `scope` names the word in errors.
fn enter_with(
    scope: impl FnOnce() -> String,
    set: impl FnOnce() -> ffi::Status,
) -> Result<MatmulPrecisionGuard, ScopeError> {
    let mut saved = [0; 3];
    // SAFETY: room for the 3 values the shim writes.
    let status = unsafe { tch_scope_matmul_save(saved.as_mut_ptr()) };
    ffi::check(status)
        .and_then(|()| ffi::check(set()))
        .map_err(|e| ScopeError::new(scope(), None, e))?;
    Ok(MatmulPrecisionGuard {
        saved,
        _not_send: crate::PhantomNotSend::NEW,
    })
}

impl Scope for MatmulPrecision {
    type Guard = MatmulPrecisionGuard;
    type Error = ScopeError;

    /// # Errors
    /// The name is not one of `"highest"`, `"high"`, `"medium"`, or the
    /// precision was set through both PyTorch's legacy and its per-backend
    /// `fp32_precision` API (libtorch then refuses to read it).
    fn enter(&mut self) -> Result<MatmulPrecisionGuard, ScopeError> {
        let i = self.precision.clone().map_err(|name| {
            ScopeError::new(
                format!("matmul_precision({name:?})"),
                None,
                "the precision must be \"highest\", \"high\" or \"medium\"",
            )
        })?;
        enter_with(
            || format!("matmul_precision({:?})", PRECISIONS[i]),
            // SAFETY: a static NUL-terminated name; exceptions caught.
            || unsafe { tch_scope_matmul_set_precision(PRECISIONS_C[i].as_ptr()) },
        )
    }
}

impl Scope for Tf32 {
    type Guard = MatmulPrecisionGuard;
    type Error = ScopeError;

    /// # Errors
    /// As for [`MatmulPrecision`]: the two precision APIs were mixed.
    fn enter(&mut self) -> Result<MatmulPrecisionGuard, ScopeError> {
        let allow = self.0;
        enter_with(
            || format!("tf32({allow})"),
            // SAFETY: a plain value; exceptions caught.
            || unsafe { tch_scope_matmul_set_tf32(allow) },
        )
    }
}

impl Drop for MatmulPrecisionGuard {
    fn drop(&mut self) {
        // SAFETY: the 3 values the shim saved; exceptions caught.
        let status = unsafe { tch_scope_matmul_restore(self.saved.as_ptr()) };
        if let Err(e) = ffi::check(status) {
            crate::exit::report(
                "matmul_precision",
                format_args!("could not restore the matmul precision: {e}"),
            );
        }
    }
}

/// `torch.get_float32_matmul_precision()`: `"highest"`, `"high"` or
/// `"medium"`.
///
/// ```
/// assert_eq!(tch_scope::matmul_precision(), "highest");
/// ```
pub fn matmul_precision() -> &'static str {
    // SAFETY: no arguments; the shim catches every exception.
    let i = unsafe { tch_scope_matmul_precision_get() };
    usize::try_from(i)
        .ok()
        .and_then(|i| PRECISIONS.get(i))
        .copied()
        .unwrap_or(PRECISIONS[0])
}

/// `torch.backends.cuda.matmul.allow_tf32`: whether cuBLAS may use TF32
/// for float32 matmuls.
///
/// ```
/// assert!(!tch_scope::allow_tf32());
/// ```
pub fn allow_tf32() -> bool {
    // SAFETY: no arguments; the shim catches every exception.
    unsafe { tch_scope_matmul_allow_tf32_get() }
}
