//! `sdpa(math, flash, ..)`: `torch.nn.attention.sdpa_kernel([...])` — only
//! the listed scaled-dot-product-attention backends are enabled inside.
//! **Process-wide** flags. As in PyTorch, a backend not listed is off,
//! libtorch's "overrideable" backend (for out-of-tree devices) included.

use crate::process_wide::{self, Fixed, Held, Registry};
use crate::{Scope, ScopeError};

unsafe extern "C" {
    fn tch_scope_sdpa_get() -> u32;
    fn tch_scope_sdpa_set(bits: u32);
}

/// One backend of `scaled_dot_product_attention`
/// (`torch.nn.attention.SDPBackend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SdpaBackend {
    /// FlashAttention (CUDA), or the flash kernel for CPU.
    Flash,
    /// Memory-efficient attention (CUDA).
    MemEfficient,
    /// The unfused reference implementation in ATen ops.
    Math,
    /// cuDNN's attention (CUDA).
    Cudnn,
}

impl SdpaBackend {
    /// All four, in the order [`sdpa_backends`] lists them.
    pub const ALL: [SdpaBackend; 4] = [Self::Flash, Self::MemEfficient, Self::Math, Self::Cudnn];

    fn bit(self) -> u32 {
        match self {
            Self::Math => 1,
            Self::Flash => 2,
            Self::MemEfficient => 4,
            Self::Cudnn => 8,
        }
    }
}

/// The enabled backends (of the four), in [`SdpaBackend::ALL`]'s order.
///
/// ```
/// use tch_scope::{SdpaBackend, sdpa_backends};
/// assert_eq!(sdpa_backends(), SdpaBackend::ALL); // libtorch's default
/// ```
pub fn sdpa_backends() -> Vec<SdpaBackend> {
    // SAFETY: no arguments; reads flags of the global context.
    let bits = unsafe { tch_scope_sdpa_get() };
    SdpaBackend::ALL
        .into_iter()
        .filter(|b| bits & b.bit() != 0)
        .collect()
}

/// Only these backends are enabled for the scope.
///
/// ```
/// use tch_scope::{Scope, Sdpa, SdpaBackend, sdpa_backends};
/// let g = Sdpa::only([SdpaBackend::Math]).enter().unwrap();
/// assert_eq!(sdpa_backends(), [SdpaBackend::Math]);
/// drop(g);
/// assert_eq!(sdpa_backends(), SdpaBackend::ALL);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Sdpa {
    bits: u32,
}

impl Sdpa {
    /// The listed backends on, every other off.
    pub fn only(backends: impl IntoIterator<Item = SdpaBackend>) -> Self {
        Self {
            bits: backends.into_iter().fold(0, |bits, b| bits | b.bit()),
        }
    }
}

/// Holds the backends; the last guard of all those open (on any thread,
/// in any order) puts back those enabled before the first. Not `Send`:
/// it is its thread's hold (see
/// [process-wide words](crate#process-wide-words)).
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct SdpaGuard {
    held: Held<Setting, Fixed>,
}

/// The enabled backends: a scope's value is their bits.
pub(crate) struct Setting;

static REGISTRY: Registry<Setting> = Registry::new();

impl process_wide::Setting for Setting {
    type Value = u32;
    type Saved = u32;
    const WORD: &'static str = "sdpa";

    fn registry() -> &'static Registry<Self> {
        &REGISTRY
    }

    fn same(a: &u32, b: &u32) -> bool {
        a == b
    }

    fn describe(bits: &u32) -> String {
        let names: Vec<&str> = SdpaBackend::ALL
            .into_iter()
            .filter(|b| bits & b.bit() != 0)
            .map(|b| match b {
                SdpaBackend::Flash => "flash",
                SdpaBackend::MemEfficient => "mem_efficient",
                SdpaBackend::Math => "math",
                SdpaBackend::Cudnn => "cudnn",
            })
            .collect();
        format!("sdpa({})", names.join(", "))
    }

    fn save() -> Result<u32, String> {
        // SAFETY: no arguments; flags of the global context.
        Ok(unsafe { tch_scope_sdpa_get() })
    }

    fn set(bits: &u32) -> Result<(), String> {
        // SAFETY: plain values; flags of the global context.
        unsafe { tch_scope_sdpa_set(*bits) };
        Ok(())
    }

    fn restore(bits: &u32) -> Result<(), String> {
        Self::set(bits)
    }

    fn code(bits: &u32) -> Option<u8> {
        u8::try_from(*bits).ok()
    }
}

impl Scope for Sdpa {
    type Guard = SdpaGuard;
    type Error = ScopeError;

    /// Setting the backends cannot fail, so neither can leaving: the
    /// success path need not look for exit errors.
    const EXIT_CAN_FAIL: bool = false;

    /// # Errors
    /// Another thread or task has `sdpa` open with other backends.
    #[inline]
    fn enter(&mut self) -> Result<SdpaGuard, ScopeError> {
        Held::enter(self.bits, Fixed).map(|held| SdpaGuard { held })
    }

    fn suspend(guard: &mut SdpaGuard) {
        guard.held.suspend();
    }

    fn resume(guard: &mut SdpaGuard) {
        guard.held.resume();
    }
}

// SAFETY: its thread-bound part is its registry entry, which `Spanned`
// steps off and onto threads around each poll (`suspend` / `resume`); the
// rest is plain data.
unsafe impl crate::process_wide::MovesWithTask for SdpaGuard {}
