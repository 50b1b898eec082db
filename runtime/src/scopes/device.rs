//! `device(…)`: `torch.cuda.device(n)` plus a thread-local current device.
//!
//! Entering sets the thread's current CUDA device (for CUDA targets) and the
//! device [`current_device`] returns, so code inside can make tensors on it
//! without passing a device around. Both are per thread; the guard is
//! `!Send` and restores both on exit.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::OnceLock;

use tch::Device;

use crate::error::DeviceName;
use crate::{Scope, ScopeError, ffi};

thread_local! {
    static CURRENT: Cell<Device> = const { Cell::new(Device::Cpu) };
}

/// The device of the innermost `device(…)` scope on this thread; `cpu`
/// outside any.
///
/// ```
/// use tch_scope::{current_device, scoped};
/// assert_eq!(current_device(), tch::Device::Cpu);
/// let inside = scoped!(device(cpu) => current_device());
/// assert_eq!(inside, tch::Device::Cpu);
/// ```
pub fn current_device() -> Device {
    CURRENT.with(Cell::get)
}

/// Number of CUDA devices libtorch sees (0 without CUDA or without a GPU).
/// Read once per process, like `torch.cuda.device_count()` caches it.
///
/// ```
/// let n = tch_scope::cuda_device_count();
/// assert_eq!(n, tch::Cuda::device_count() as usize);
/// ```
pub fn cuda_device_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        let mut n = 0i32;
        // SAFETY: `n` is writable; the shim catches C++ exceptions.
        match ffi::check(unsafe { ffi::tch_scope_cuda_device_count(&mut n) }) {
            Ok(()) => usize::try_from(n).unwrap_or(0),
            Err(_) => 0,
        }
    })
}

/// Whether this build links libtorch_cuda (the libtorch found had CUDA).
///
/// ```
/// let _ = tch_scope::built_with_cuda();
/// ```
pub fn built_with_cuda() -> bool {
    ffi::built_with_cuda()
}

/// Something that names a device: a [`tch::Device`], an integer `n`
/// (meaning `cuda:n`), or a string `"cpu"`, `"cuda:1"`, `"mps"`.
///
/// ```
/// use tch_scope::IntoScopeDevice;
/// assert_eq!("cuda:1".into_scope_device(), Ok(tch::Device::Cuda(1)));
/// assert_eq!(2usize.into_scope_device(), Ok(tch::Device::Cuda(2)));
/// assert!("gpu".into_scope_device().is_err());
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not name a device",
    label = "expected a device",
    note = "write `device(0)`, `device(cpu)` or `device(\"cuda:1\")`, or pass a `tch::Device`, an integer CUDA index or a device string"
)]
pub trait IntoScopeDevice {
    /// The device, or why the value names none.
    ///
    /// # Errors
    /// A [`ScopeError`] for strings that are no device or negative indices.
    fn into_scope_device(self) -> Result<Device, ScopeError>;
}

impl IntoScopeDevice for Device {
    fn into_scope_device(self) -> Result<Device, ScopeError> {
        Ok(self)
    }
}

macro_rules! cuda_index {
    ($($t:ty),*) => {$(
        impl IntoScopeDevice for $t {
            #[allow(irrefutable_let_patterns, clippy::unnecessary_fallible_conversions)]
            fn into_scope_device(self) -> Result<Device, ScopeError> {
                match usize::try_from(self) {
                    Ok(i) => Ok(Device::Cuda(i)),
                    Err(_) => Err(ScopeError::new(
                        format!("device({self})"),
                        None,
                        "a CUDA device index must be 0 or more",
                    )),
                }
            }
        }
    )*};
}
cuda_index!(usize, u32, u64, i32, i64);

impl IntoScopeDevice for &str {
    fn into_scope_device(self) -> Result<Device, ScopeError> {
        parse_device(self).ok_or_else(|| {
            ScopeError::new(
                format!("device({self:?})"),
                None,
                "not a device; write \"cpu\", \"cuda:N\" (N = 0, 1, …) or \"mps\"",
            )
        })
    }
}

impl IntoScopeDevice for &String {
    fn into_scope_device(self) -> Result<Device, ScopeError> {
        self.as_str().into_scope_device()
    }
}

fn parse_device(s: &str) -> Option<Device> {
    match s {
        "cpu" => Some(Device::Cpu),
        "mps" => Some(Device::Mps),
        "vulkan" => Some(Device::Vulkan),
        _ => {
            let i = s.strip_prefix("cuda:")?;
            if i.is_empty() || !i.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            i.parse().ok().map(Device::Cuda)
        }
    }
}

/// The `device(…)` scope.
///
/// ```
/// use tch_scope::{OnDevice, Scope, current_device};
/// let g = OnDevice::new("cpu").enter().unwrap();
/// assert_eq!(current_device(), tch::Device::Cpu);
/// drop(g);
/// // With no GPU, a CUDA device is an error, not a crash:
/// if tch_scope::cuda_device_count() == 0 {
///     let e = OnDevice::new(0).enter().unwrap_err();
///     assert_eq!(e.device(), Some(tch::Device::Cuda(0)));
/// }
/// ```
#[derive(Debug, Clone)]
pub struct OnDevice {
    device: Result<Device, ScopeError>,
}

impl OnDevice {
    /// A scope that makes `device` current; a bad `device` is reported when
    /// the scope is entered.
    ///
    /// ```
    /// let _ = tch_scope::OnDevice::new(tch::Device::Cpu);
    /// ```
    pub fn new(device: impl IntoScopeDevice) -> Self {
        Self {
            device: device.into_scope_device(),
        }
    }
}

/// Restores the thread's current device (and CUDA device) found on entry.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct DeviceGuard {
    previous: Device,
    previous_cuda: Option<i32>,
    _not_send: PhantomData<*const ()>,
}

impl Scope for OnDevice {
    type Guard = DeviceGuard;
    type Error = ScopeError;

    fn enter(&mut self) -> Result<DeviceGuard, ScopeError> {
        let device = self.device.clone()?;
        let previous_cuda = match device {
            Device::Cpu => None,
            Device::Cuda(i) => Some(enter_cuda(i)?),
            Device::Mps if tch::utils::has_mps() => None,
            Device::Vulkan if tch::utils::has_vulkan() => None,
            Device::Mps | Device::Vulkan => {
                return Err(ScopeError::new(
                    format!("device({})", DeviceName(device)),
                    Some(device),
                    "this libtorch has no such backend",
                ));
            }
        };
        let previous = CURRENT.with(|c| c.replace(device));
        Ok(DeviceGuard {
            previous,
            previous_cuda,
            _not_send: PhantomData,
        })
    }
}

/// Makes cuda:`i` the thread's current CUDA device; returns the previous.
fn enter_cuda(i: usize) -> Result<i32, ScopeError> {
    let device = Device::Cuda(i);
    let fail = |reason: String| ScopeError::new(format!("device({i})"), Some(device), reason);
    let count = cuda_device_count();
    if count == 0 {
        return Err(fail(if built_with_cuda() {
            "CUDA is not available: libtorch sees no CUDA device on this machine".into()
        } else {
            "CUDA is not available: this libtorch was built without CUDA".into()
        }));
    }
    if i >= count {
        return Err(fail(format!(
            "device index {i} is out of range: this machine has {count} CUDA device{}",
            if count == 1 { "" } else { "s" }
        )));
    }
    let mut previous = 0i32;
    // `i < count <= i32::MAX` here.
    let index = i32::try_from(i).map_err(|_| fail("device index too large".into()))?;
    // SAFETY: `previous` is writable; the shim catches C++ exceptions.
    ffi::check(unsafe { ffi::tch_scope_cuda_exchange_device(index, &mut previous) })
        .map_err(fail)?;
    Ok(previous)
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.previous));
        if let Some(prev) = self.previous_cuda {
            let mut ignored = 0i32;
            // A failing restore must not panic in Drop (possibly while
            // unwinding): it goes to the exit hook.
            // SAFETY: `ignored` is writable; the shim catches exceptions.
            let status = unsafe { ffi::tch_scope_cuda_exchange_device(prev, &mut ignored) };
            if let Err(e) = ffi::check(status) {
                crate::exit::report(
                    "device",
                    format_args!("could not make cuda:{prev} current again: {e}"),
                );
            }
        }
    }
}

/// The thread's current CUDA device index (`torch.cuda.current_device()`),
/// or `None` without CUDA.
///
/// ```
/// if tch_scope::cuda_device_count() == 0 {
///     assert_eq!(tch_scope::current_cuda_device(), None);
/// }
/// ```
pub fn current_cuda_device() -> Option<usize> {
    if cuda_device_count() == 0 {
        return None;
    }
    let mut i = 0i32;
    // SAFETY: `i` is writable; the shim catches C++ exceptions.
    ffi::check(unsafe { ffi::tch_scope_cuda_current_device(&mut i) }).ok()?;
    usize::try_from(i).ok()
}
