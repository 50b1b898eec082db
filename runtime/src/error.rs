//! The one error type of tch-scope.

use std::borrow::Cow;
use std::fmt;

/// Why a scope could not be entered: which scope, on which device, and why.
///
/// Returned by [`Scope::enter`](crate::Scope::enter) and
/// [`try_scoped!`](crate::try_scoped); an attribute on a function returning
/// `Result<_, E>` converts it with `E: From<ScopeError>`.
///
/// ```
/// use tch_scope::ScopeError;
/// let e = ScopeError::new("device(3)", Some(tch::Device::Cuda(3)), "no CUDA device");
/// assert_eq!(e.to_string(), "cannot enter `device(3)` on cuda:3: no CUDA device");
/// assert_eq!(e.scope(), "device(3)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot enter `{scope}`{on}: {reason}", on = OnDevice(*device))]
pub struct ScopeError {
    scope: Cow<'static, str>,
    device: Option<tch::Device>,
    reason: String,
}

impl ScopeError {
    /// A new error for `scope` (as the user wrote it), on `device` if one is
    /// involved, with a human-readable `reason`.
    ///
    /// ```
    /// let e = tch_scope::ScopeError::new("my_scope", None, "already closed");
    /// assert_eq!(e.to_string(), "cannot enter `my_scope`: already closed");
    /// ```
    pub fn new(
        scope: impl Into<Cow<'static, str>>,
        device: Option<tch::Device>,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            scope: scope.into(),
            device,
            reason: reason.into(),
        }
    }

    /// The scope that failed, as written (`"device(3)"`, `"inference_mode"`).
    ///
    /// ```
    /// let e = tch_scope::ScopeError::new("no_grad", None, "x");
    /// assert_eq!(e.scope(), "no_grad");
    /// ```
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The device involved, if any.
    ///
    /// ```
    /// let e = tch_scope::ScopeError::new("device(1)", Some(tch::Device::Cuda(1)), "x");
    /// assert_eq!(e.device(), Some(tch::Device::Cuda(1)));
    /// ```
    pub fn device(&self) -> Option<tch::Device> {
        self.device
    }

    /// Why it failed.
    ///
    /// ```
    /// let e = tch_scope::ScopeError::new("no_grad", None, "because");
    /// assert_eq!(e.reason(), "because");
    /// ```
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// ` on cuda:3`, or nothing when no device is involved.
struct OnDevice(Option<tch::Device>);

impl fmt::Display for OnDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(d) => write!(f, " on {}", DeviceName(d)),
            None => Ok(()),
        }
    }
}

/// Displays a device the way PyTorch writes it: `cpu`, `cuda:0`, `mps`.
pub(crate) struct DeviceName(pub tch::Device);

impl fmt::Display for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            tch::Device::Cpu => f.write_str("cpu"),
            tch::Device::Cuda(i) => write!(f, "cuda:{i}"),
            tch::Device::Mps => f.write_str("mps"),
            tch::Device::Vulkan => f.write_str("vulkan"),
        }
    }
}
