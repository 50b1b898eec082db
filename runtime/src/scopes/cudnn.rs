//! `cudnn(enabled = .., benchmark = .., deterministic = .., allow_tf32 = ..)`:
//! `torch.backends.cudnn.flags(...)` for a scope. **Process-wide** flags.
//! Unlike Python's `flags()`, which sets every flag (an argument left out
//! takes its default, so `flags()` alone turns cuDNN off), only the flags
//! written change; the last scope to end puts back exactly those, in
//! whatever order scopes of many threads end (see
//! [process-wide words](crate#process-wide-words)).

use crate::process_wide::{self, Fixed, Held, Registry};
use crate::{Scope, ScopeError, ffi};

unsafe extern "C" {
    fn tch_scope_cudnn_get(out: *mut bool);
    fn tch_scope_cudnn_set(set: *const bool, value: *const bool) -> ffi::Status;
    fn tch_scope_cudnn_swap(which: i32, value: bool, was: *mut u32) -> ffi::Status;
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
    pub fn new() -> Self {
        Self::default()
    }

    /// `enabled`: whether cuDNN may be used.
    pub fn enabled(mut self, on: bool) -> Self {
        self.set[0] = Some(on);
        self
    }

    /// `benchmark`: time the convolution algorithms and keep the fastest.
    pub fn benchmark(mut self, on: bool) -> Self {
        self.set[1] = Some(on);
        self
    }

    /// `deterministic`: only deterministic convolution algorithms.
    pub fn deterministic(mut self, on: bool) -> Self {
        self.set[2] = Some(on);
        self
    }

    /// `allow_tf32`: TF32 in cuDNN convolutions.
    pub fn allow_tf32(mut self, on: bool) -> Self {
        self.set[3] = Some(on);
        self
    }
}

/// Holds the flags the scope sets; for each, the last guard of all those
/// open (on any thread, in any order) puts back the flag found before the
/// first. Each flag is a setting of its own: `cudnn(benchmark = true)` on
/// one thread and `cudnn(deterministic = true)` on another do not
/// conflict. Not `Send`: it is its thread's hold (see
/// [process-wide words](crate#process-wide-words)).
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct CudnnGuard {
    // Dropped in reverse of the order entered.
    allow_tf32: Option<Held<Flag<3>, Fixed>>,
    deterministic: Option<Held<Flag<2>, Fixed>>,
    benchmark: Option<Held<Flag<1>, Fixed>>,
    enabled: Option<Held<Flag<0>, Fixed>>,
}

#[inline]
fn set(which: &[bool; 4], value: &[bool; 4]) -> Result<(), String> {
    // SAFETY: two arrays of the 4 flags; exceptions caught by the shim.
    ffi::check(unsafe { tch_scope_cudnn_set(which.as_ptr(), value.as_ptr()) })
}

/// One cuDNN flag, `I` in `CudnnFlags::to_array`'s order.
pub(crate) struct Flag<const I: usize>;

const NAMES: [&str; 4] = ["enabled", "benchmark", "deterministic", "allow_tf32"];

static REGISTRIES: (
    Registry<Flag<0>>,
    Registry<Flag<1>>,
    Registry<Flag<2>>,
    Registry<Flag<3>>,
) = (
    Registry::new(),
    Registry::new(),
    Registry::new(),
    Registry::new(),
);

macro_rules! flag_registry {
    ($($i:literal => $field:tt),*) => {$(
        impl process_wide::Setting for Flag<$i> {
            type Value = bool;
            type Saved = bool;
            const WORD: &'static str = "cudnn";

            #[inline]
            fn registry() -> &'static Registry<Self> {
                &REGISTRIES.$field
            }

            fn same(a: &bool, b: &bool) -> bool {
                a == b
            }

            fn describe(on: &bool) -> String {
                format!("cudnn({} = {on})", NAMES[$i])
            }

            fn save() -> Result<bool, String> {
                Ok(cudnn_flags().to_array()[$i])
            }

            #[inline]
            fn set(on: &bool) -> Result<(), String> {
                let mut which = [false; 4];
                which[$i] = true;
                let mut value = [false; 4];
                value[$i] = *on;
                set(&which, &value)
            }

            #[inline]
            fn restore(on: &bool) -> Result<(), String> {
                Self::set(on)
            }

            #[inline]
            fn code(on: &bool) -> Option<u8> {
                Some(u8::from(*on))
            }

            #[inline]
            fn swap(on: &bool) -> Result<bool, String> {
                let mut was = 0;
                // SAFETY: a writable out-param; exceptions caught by the shim.
                ffi::check(unsafe { tch_scope_cudnn_swap($i, *on, &mut was) })?;
                Ok(was != 0)
            }
        }
    )*};
}
flag_registry!(0 => 0, 1 => 1, 2 => 2, 3 => 3);

#[inline]
fn hold<const I: usize>(v: Option<bool>) -> Result<Option<Held<Flag<I>, Fixed>>, ScopeError>
where
    Flag<I>: process_wide::Setting<Value = bool>,
{
    v.map(|on| Held::enter(on, Fixed)).transpose()
}

impl Scope for Cudnn {
    type Guard = CudnnGuard;
    type Error = ScopeError;

    /// # Errors
    /// Another thread or task has a flag this scope sets open with the
    /// other value, or libtorch refused a flag (`allow_tf32` where
    /// PyTorch's legacy and per-backend precision APIs were mixed). The
    /// flags set before the one refused are put back.
    #[inline]
    fn enter(&mut self) -> Result<CudnnGuard, ScopeError> {
        let [enabled, benchmark, deterministic, allow_tf32] = self.set;
        let enabled = hold::<0>(enabled)?;
        let benchmark = hold::<1>(benchmark)?;
        let deterministic = hold::<2>(deterministic)?;
        let allow_tf32 = hold::<3>(allow_tf32)?;
        Ok(CudnnGuard {
            allow_tf32,
            deterministic,
            benchmark,
            enabled,
        })
    }

    fn suspend(guard: &mut CudnnGuard) {
        guard.each(
            |h| h.suspend(),
            |h| h.suspend(),
            |h| h.suspend(),
            |h| h.suspend(),
        );
    }

    fn resume(guard: &mut CudnnGuard) {
        guard.each(
            |h| h.resume(),
            |h| h.resume(),
            |h| h.resume(),
            |h| h.resume(),
        );
    }
}

impl CudnnGuard {
    fn each(
        &self,
        a: impl FnOnce(&Held<Flag<0>, Fixed>),
        b: impl FnOnce(&Held<Flag<1>, Fixed>),
        c: impl FnOnce(&Held<Flag<2>, Fixed>),
        d: impl FnOnce(&Held<Flag<3>, Fixed>),
    ) {
        self.enabled.as_ref().map(a);
        self.benchmark.as_ref().map(b);
        self.deterministic.as_ref().map(c);
        self.allow_tf32.as_ref().map(d);
    }
}

// SAFETY: its thread-bound part is its registry entry, which `Spanned`
// steps off and onto threads around each poll (`suspend` / `resume`); the
// rest is plain data.
unsafe impl crate::process_wide::MovesWithTask for CudnnGuard {}
