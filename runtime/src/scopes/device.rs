//! `device(…)`: `torch.cuda.device(n)` plus a thread-local current device.
//!
//! Entering sets the thread's current CUDA device (for CUDA targets) and the
//! device [`current_device`] returns, so code inside can make tensors on it
//! without passing a device around. Both are per thread; the guard is
//! `!Send` and restores both on exit.

use std::cell::Cell;

use tch::Device;

use crate::error::DeviceName;
use crate::{Scope, ScopeError, cuda};

thread_local! {
    static CURRENT: Cell<Device> = const { Cell::new(Device::Cpu) };
}

/// The device of the innermost `device(…)` scope on this thread; `cpu`
/// outside any.
///
/// ```no_run
/// use tch_scope::{current_device, scoped};
/// assert_eq!(current_device(), tch::Device::Cpu);
/// let inside = scoped!(device(cpu) => current_device());
/// assert_eq!(inside, tch::Device::Cpu);
/// ```
#[inline]
pub fn current_device() -> Device {
    CURRENT.with(Cell::get)
}

/// Something that names a device: a [`tch::Device`], an integer `n`
/// (meaning `cuda:n`), or a string `"cpu"`, `"cuda:1"`, `"mps"`.
///
/// ```no_run
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
    _not_send: crate::PhantomNotSend,
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
            _not_send: crate::PhantomNotSend::NEW,
        })
    }
}

/// Makes `device` the thread's current device and, with `cuda`, cuda:`cuda`
/// its current CUDA device, as a [`Context`](crate::Context) captured them
/// on another thread; the guard puts this thread's own back.
pub(crate) fn enter_captured(
    device: Device,
    cuda: Option<usize>,
) -> Result<DeviceGuard, ScopeError> {
    let previous_cuda = cuda.map(enter_cuda).transpose()?;
    let previous = CURRENT.with(|c| c.replace(device));
    Ok(DeviceGuard {
        previous,
        previous_cuda,
        _not_send: crate::PhantomNotSend::NEW,
    })
}

/// Makes cuda:`i` the thread's current CUDA device; returns the previous.
fn enter_cuda(i: usize) -> Result<i32, ScopeError> {
    let scope = format!("device({i})");
    let index = cuda::require(&scope, i)?;
    cuda::exchange_device(index).map_err(|r| ScopeError::new(scope, Some(Device::Cuda(i)), r))
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.previous));
        if let Some(prev) = self.previous_cuda {
            // A failing restore must not panic in Drop (possibly while
            // unwinding): it goes to the exit hook.
            if let Err(e) = cuda::exchange_device(prev) {
                crate::exit::report(
                    "device",
                    format_args!("could not make cuda:{prev} current again: {e}"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{IntoScopeDevice, OnDevice, current_device};
    use crate::Scope;
    use tch::Device;

    #[test]
    fn what_names_a_device() {
        assert_eq!("cuda:1".into_scope_device(), Ok(Device::Cuda(1)));
        assert_eq!(2usize.into_scope_device(), Ok(Device::Cuda(2)));
        assert!("gpu".into_scope_device().is_err());
    }

    #[test]
    fn the_current_device_is_cpu_outside_any_scope() {
        assert_eq!(current_device(), Device::Cpu);
        let g = OnDevice::new(Device::Cpu).enter().unwrap();
        assert_eq!(current_device(), Device::Cpu);
        drop(g);
        assert_eq!(current_device(), Device::Cpu);
    }
}
