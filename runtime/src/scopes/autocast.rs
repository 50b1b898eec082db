//! `autocast(cpu, bf16)`, `autocast(cuda, f16)`: `torch.autocast`.
//!
//! Inside, ops on the chosen device type that autocast covers (matmul,
//! linear, conv, …) run in the lower precision; the others keep f32. The
//! state is per thread in libtorch (the guard is `!Send`). Entering and
//! leaving follow `torch/amp/autocast_mode.py` exactly: the previous
//! enabled flag, dtype and cast-cache flag are saved and put back, and the
//! cast cache is cleared when the outermost autocast of the thread ends, so
//! nested scopes (`autocast(cpu, bf16)` around `autocast(cpu, f16)`, or an
//! inner `Autocast::cpu(..).enabled(false)`) behave as in PyTorch.

use tch::Kind;

use crate::{Scope, ScopeError, ffi};

/// The shim's `tch_scope_autocast_saved` (`csrc/context.h`, which asserts
/// the same layout).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Saved {
    enabled: bool,
    dtype: i8,
    cache_enabled: bool,
}

const _: () = {
    assert!(size_of::<Saved>() == 3 && align_of::<Saved>() == 1);
    assert!(std::mem::offset_of!(Saved, enabled) == 0);
    assert!(std::mem::offset_of!(Saved, dtype) == 1);
    assert!(std::mem::offset_of!(Saved, cache_enabled) == 2);
};

unsafe extern "C" {
    fn tch_scope_autocast_enter(
        device: i8,
        dtype: i8,
        enabled: bool,
        cache: i8,
        saved: *mut Saved,
    ) -> ffi::Status;
    fn tch_scope_autocast_exit(device: i8, saved: *const Saved) -> ffi::Status;
    fn tch_scope_autocast_get(device: i8, enabled: *mut bool, dtype: *mut i8) -> ffi::Status;
    fn tch_scope_autocast_cache_enabled() -> bool;
}

/// The device types autocast acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutocastDevice {
    /// `torch.autocast("cpu")`; bf16 by default.
    Cpu,
    /// `torch.autocast("cuda")`, every CUDA device; f16 by default.
    Cuda,
}

impl AutocastDevice {
    /// `c10::DeviceType`.
    fn code(self) -> i8 {
        match self {
            AutocastDevice::Cpu => 0,
            AutocastDevice::Cuda => 1,
        }
    }

    fn name(self) -> &'static str {
        match self {
            AutocastDevice::Cpu => "cpu",
            AutocastDevice::Cuda => "cuda",
        }
    }
}

/// `c10::ScalarType` codes of the kinds autocast uses.
fn kind_code(kind: Kind) -> Option<i8> {
    match kind {
        Kind::Half => Some(5),
        Kind::Float => Some(6),
        Kind::BFloat16 => Some(15),
        _ => None,
    }
}

fn code_kind(code: i8) -> Option<Kind> {
    [Kind::Half, Kind::Float, Kind::BFloat16]
        .into_iter()
        .find(|&k| kind_code(k) == Some(code))
}

/// `torch.autocast(device_type, dtype, enabled)`.
///
/// ```
/// use tch::{Device, Kind, Tensor};
/// use tch_scope::{Autocast, Scope};
/// let a = Tensor::ones([2, 2], (Kind::Float, Device::Cpu));
/// let guard = Autocast::cpu(Kind::BFloat16).enter().unwrap();
/// assert_eq!(a.matmul(&a).kind(), Kind::BFloat16);
/// drop(guard);
/// assert_eq!(a.matmul(&a).kind(), Kind::Float);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Autocast {
    device: AutocastDevice,
    dtype: Kind,
    enabled: bool,
    cache: Option<bool>,
}

impl Autocast {
    /// Autocast on `device` to `dtype` (`Kind::Half` or `Kind::BFloat16`).
    pub fn new(device: AutocastDevice, dtype: Kind) -> Self {
        Self {
            device,
            dtype,
            enabled: true,
            cache: None,
        }
    }

    /// `torch.autocast("cpu", dtype)`.
    pub fn cpu(dtype: Kind) -> Self {
        Self::new(AutocastDevice::Cpu, dtype)
    }

    /// `torch.autocast("cuda", dtype)`.
    pub fn cuda(dtype: Kind) -> Self {
        Self::new(AutocastDevice::Cuda, dtype)
    }

    /// `enabled=False` turns autocast *off* for the scope, e.g. to compute a
    /// loss in f32 inside an autocast region.
    ///
    /// ```no_run
    /// use tch::{Device, Kind, Tensor};
    /// use tch_scope::{Autocast, scoped};
    /// let a = Tensor::ones([2, 2], (Kind::Float, Device::Cpu));
    /// let off = Autocast::cpu(Kind::BFloat16).enabled(false);
    /// let k = scoped!(autocast(cpu, bf16), with(off) => a.matmul(&a).kind());
    /// assert_eq!(k, Kind::Float);
    /// ```
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// `cache_enabled=`: whether casts of the same tensor are cached
    /// inside (a weight cast once per scope, not once per use). Left
    /// unset, the thread's current setting is kept (on by default), as in
    /// PyTorch.
    ///
    /// ```no_run
    /// use tch::{Device, Kind, Tensor};
    /// use tch_scope::scoped;
    /// let w = Tensor::ones([2, 2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    /// let k = scoped!(autocast(cpu, bf16, cache = false) => w.matmul(&w).kind());
    /// assert_eq!(k, Kind::BFloat16);
    /// ```
    pub fn cache(mut self, enabled: bool) -> Self {
        self.cache = Some(enabled);
        self
    }

    fn label(&self) -> String {
        let dtype = match self.dtype {
            Kind::Half => "f16",
            Kind::BFloat16 => "bf16",
            _ => "?",
        };
        format!("autocast({}, {dtype})", self.device.name())
    }
}

/// Puts back the autocast state found on entry.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
pub struct AutocastGuard {
    device: AutocastDevice,
    saved: Saved,
    _not_send: crate::PhantomNotSend,
}

impl std::fmt::Debug for AutocastGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutocastGuard")
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl Scope for Autocast {
    type Guard = AutocastGuard;
    type Error = ScopeError;

    fn enter(&mut self) -> Result<AutocastGuard, ScopeError> {
        let dtype = match self.dtype {
            Kind::Half | Kind::BFloat16 => kind_code(self.dtype).unwrap_or_default(),
            other => {
                return Err(ScopeError::new(
                    self.label(),
                    None,
                    format!("autocast needs Kind::Half or Kind::BFloat16, not {other:?}"),
                ));
            }
        };
        if self.device == AutocastDevice::Cuda && crate::cuda_device_count() == 0 {
            return Err(ScopeError::new(
                self.label(),
                None,
                "CUDA is not available (libtorch without CUDA, or no GPU)",
            ));
        }
        let mut saved = Saved::default();
        // SAFETY: plain values and a writable out-param; exceptions caught.
        let status = unsafe {
            tch_scope_autocast_enter(
                self.device.code(),
                dtype,
                self.enabled,
                self.cache.map_or(-1, i8::from),
                &mut saved,
            )
        };
        ffi::check(status).map_err(|e| ScopeError::new(self.label(), None, e))?;
        Ok(AutocastGuard {
            device: self.device,
            saved,
            _not_send: crate::PhantomNotSend::NEW,
        })
    }
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        // SAFETY: same thread as entry (the guard is !Send).
        let status = unsafe { tch_scope_autocast_exit(self.device.code(), &self.saved) };
        if let Err(e) = ffi::check(status) {
            crate::exit::report("autocast", format_args!("could not restore autocast: {e}"));
        }
    }
}

/// The autocast dtype of `device` on this thread, or `None` when autocast
/// is off there (`torch.is_autocast_enabled(device)` and
/// `torch.get_autocast_dtype(device)`).
///
/// ```no_run
/// use tch_scope::{AutocastDevice, autocast_dtype, scoped};
/// assert_eq!(autocast_dtype(AutocastDevice::Cpu), None);
/// let inside = scoped!(autocast(cpu, bf16) => autocast_dtype(AutocastDevice::Cpu));
/// assert_eq!(inside, Some(tch::Kind::BFloat16));
/// ```
pub fn autocast_dtype(device: AutocastDevice) -> Option<Kind> {
    let (mut enabled, mut dtype) = (false, 0i8);
    // SAFETY: writable out-params; exceptions caught.
    let status = unsafe { tch_scope_autocast_get(device.code(), &mut enabled, &mut dtype) };
    match ffi::check(status) {
        Ok(()) if enabled => code_kind(dtype),
        _ => None,
    }
}

/// Whether autocast caches its casts on this thread
/// (`torch.is_autocast_cache_enabled()`).
///
/// ```no_run
/// use tch_scope::{autocast_cache_enabled, scoped};
/// assert!(autocast_cache_enabled());
/// assert!(!scoped!(autocast(cpu, cache = false) => autocast_cache_enabled()));
/// assert!(autocast_cache_enabled());
/// ```
pub fn autocast_cache_enabled() -> bool {
    // SAFETY: no arguments; reads a thread-local flag.
    unsafe { tch_scope_autocast_cache_enabled() }
}
