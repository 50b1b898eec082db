//! `matmul_precision(..)` and `tf32(flag)`: the precision of float32 matrix
//! multiplications (`torch.set_float32_matmul_precision`,
//! `torch.backends.cuda.matmul.allow_tf32`). In libtorch these are one
//! setting seen two ways — `"high"` and `"medium"` allow TF32, `"highest"`
//! does not — and **process-wide**: every thread's matmuls see it while the
//! scope is open. The first open scope saves the whole matmul state (the
//! legacy setting and the per-backend matmul entries it overwrites) and
//! the last to end puts it back exactly, in whatever order scopes of many
//! threads end (see [process-wide words](crate#process-wide-words)).

use crate::process_wide::{self, Fixed, Held, Registry};
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

/// Holds the precision; the last guard of all those open (on any thread,
/// in any order) puts back the matmul state found before the first. Not `Send`
/// (see [process-wide words](crate#process-wide-words)). `tf32(true)` and
/// `matmul_precision("high")` are the same value, and so are `tf32(false)`
/// and `matmul_precision("highest")`: scopes of two threads spelling them
/// differently share it.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct MatmulPrecisionGuard {
    held: Held<Setting, Fixed>,
}

/// The float32 matmul precision: a scope's value is the level (an index
/// into [`PRECISIONS`]) and whether it was spelled `tf32(..)`.
pub(crate) struct Setting;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Level {
    index: usize,
    tf32: bool,
}

static REGISTRY: Registry<Setting> = Registry::new();

impl process_wide::Setting for Setting {
    type Value = Level;
    type Saved = [i32; 3];
    const WORD: &'static str = "matmul_precision";

    fn registry() -> &'static Registry<Self> {
        &REGISTRY
    }

    fn same(a: &Level, b: &Level) -> bool {
        a.index == b.index
    }

    fn describe(l: &Level) -> String {
        if l.tf32 {
            format!("tf32({})", l.index == 1)
        } else {
            format!("matmul_precision({:?})", PRECISIONS[l.index])
        }
    }

    fn save() -> Result<[i32; 3], String> {
        let mut saved = [0; 3];
        // SAFETY: room for the 3 values the shim writes.
        ffi::check(unsafe { tch_scope_matmul_save(saved.as_mut_ptr()) })?;
        Ok(saved)
    }

    fn set(l: &Level) -> Result<(), String> {
        ffi::check(if l.tf32 {
            // SAFETY: a plain value; exceptions caught.
            unsafe { tch_scope_matmul_set_tf32(l.index == 1) }
        } else {
            // SAFETY: a static NUL-terminated name; exceptions caught.
            unsafe { tch_scope_matmul_set_precision(PRECISIONS_C[l.index].as_ptr()) }
        })
    }

    fn restore(saved: &[i32; 3]) -> Result<(), String> {
        // SAFETY: the 3 values the shim saved; exceptions caught.
        ffi::check(unsafe { tch_scope_matmul_restore(saved.as_ptr()) })
    }

    fn code(l: &Level) -> Option<u8> {
        // The spelling too: messages name a scope as it was written.
        u8::try_from(l.index)
            .ok()
            .map(|i| i << 1 | u8::from(l.tf32))
    }
}

#[inline]
fn enter(level: Level) -> Result<MatmulPrecisionGuard, ScopeError> {
    Held::enter(level, Fixed).map(|held| MatmulPrecisionGuard { held })
}

impl Scope for MatmulPrecision {
    type Guard = MatmulPrecisionGuard;
    type Error = ScopeError;

    /// # Errors
    /// The name is not one of `"highest"`, `"high"`, `"medium"`; another
    /// thread or task has another precision open; or the precision was set
    /// through both PyTorch's legacy and its per-backend `fp32_precision`
    /// API (libtorch then refuses to read it).
    #[inline]
    fn enter(&mut self) -> Result<MatmulPrecisionGuard, ScopeError> {
        let index = self.precision.clone().map_err(|name| {
            ScopeError::new(
                format!("matmul_precision({name:?})"),
                None,
                "the precision must be \"highest\", \"high\" or \"medium\"",
            )
        })?;
        enter(Level { index, tf32: false })
    }

    fn suspend(guard: &mut MatmulPrecisionGuard) {
        guard.held.suspend();
    }

    fn resume(guard: &mut MatmulPrecisionGuard) {
        guard.held.resume();
    }
}

impl Scope for Tf32 {
    type Guard = MatmulPrecisionGuard;
    type Error = ScopeError;

    /// # Errors
    /// As for [`MatmulPrecision`]: another precision is open on another
    /// thread, or the two precision APIs were mixed.
    #[inline]
    fn enter(&mut self) -> Result<MatmulPrecisionGuard, ScopeError> {
        enter(Level {
            index: usize::from(self.0),
            tf32: true,
        })
    }

    fn suspend(guard: &mut MatmulPrecisionGuard) {
        guard.held.suspend();
    }

    fn resume(guard: &mut MatmulPrecisionGuard) {
        guard.held.resume();
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

// SAFETY: its thread-bound part is its registry entry, which `Spanned`
// steps off and onto threads around each poll (`suspend` / `resume`); the
// rest is plain data.
unsafe impl crate::process_wide::MovesWithTask for MatmulPrecisionGuard {}
