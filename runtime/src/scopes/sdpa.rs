//! `sdpa(math, flash, ..)`: `torch.nn.attention.sdpa_kernel([...])` — only
//! the listed scaled-dot-product-attention backends are enabled inside.
//! **Process-wide** flags. As in PyTorch, a backend not listed is off,
//! libtorch's "overrideable" backend (for out-of-tree devices) included.

use crate::Scope;

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
    ///
    /// ```
    /// let _ = tch_scope::Sdpa::only([tch_scope::SdpaBackend::Flash]);
    /// ```
    pub fn only(backends: impl IntoIterator<Item = SdpaBackend>) -> Self {
        Self {
            bits: backends.into_iter().fold(0, |bits, b| bits | b.bit()),
        }
    }
}

/// Puts back the backends enabled on entry.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct SdpaGuard {
    previous: u32,
    _not_send: crate::PhantomNotSend,
}

impl Scope for Sdpa {
    type Guard = SdpaGuard;
    type Error = std::convert::Infallible;

    fn enter(&mut self) -> Result<SdpaGuard, Self::Error> {
        // SAFETY: plain values; flags of the global context.
        let previous = unsafe { tch_scope_sdpa_get() };
        // SAFETY: as above.
        unsafe { tch_scope_sdpa_set(self.bits) };
        Ok(SdpaGuard {
            previous,
            _not_send: crate::PhantomNotSend::NEW,
        })
    }
}

impl Drop for SdpaGuard {
    fn drop(&mut self) {
        // SAFETY: the bits read on entry.
        unsafe { tch_scope_sdpa_set(self.previous) };
    }
}
