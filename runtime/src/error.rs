//! The one error type of tch-scope, and [`EntryError`]: whether a scope's
//! entry can fail at all.

use std::borrow::Cow;
use std::convert::Infallible;
use std::fmt;

/// Why a scope could not be entered: which scope, on which device, and why.
///
/// Returned by [`Scope::enter`](crate::Scope::enter) of the scopes that can
/// fail and by [`try_scoped!`](crate::try_scoped). An attribute on a
/// function returning `Result<_, E>` returns `Err(E::from(e))` where
/// `E: From<ScopeError>`, and panics with this message otherwise.
///
/// ```
/// use tch_scope::ScopeError;
/// let e = ScopeError::new("device(3)", Some(tch::Device::Cuda(3)), "no CUDA device");
/// assert_eq!(e.to_string(), "cannot enter `device(3)` on cuda:3: no CUDA device");
/// assert_eq!(e.scope(), "device(3)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", Message(self))]
pub struct ScopeError {
    scope: Cow<'static, str>,
    device: Option<tch::Device>,
    reason: String,
    /// Entered, then ended by a failure of its own (a deadline that passed).
    ended: bool,
}

/// "cannot enter `scope` on dev: reason", or the reason alone for a scope
/// that ended in failure (it says what happened: "deadline of 100 ms
/// exceeded after 103 ms at aten::mm").
struct Message<'a>(&'a ScopeError);

impl fmt::Display for Message<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        if e.ended {
            f.write_str(&e.reason)
        } else {
            write!(
                f,
                "cannot enter `{}`{}: {}",
                e.scope,
                OnDevice(e.device),
                e.reason
            )
        }
    }
}

impl ScopeError {
    /// A new error for `scope` (as the user wrote it), on `device` if one is
    /// involved, with a human-readable `reason`.
    ///
    /// ```no_run
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
            ended: false,
        }
    }

    /// An error for a scope that was entered and then ended the body by a
    /// failure of its own — a `deadline` that passed. Its message is the
    /// `reason` alone, which says what happened.
    ///
    /// ```no_run
    /// let e = tch_scope::ScopeError::ended("deadline(100 ms)", None, "deadline of 100 ms exceeded after 103 ms at aten::mm");
    /// assert_eq!(e.to_string(), "deadline of 100 ms exceeded after 103 ms at aten::mm");
    /// assert!(e.is_ended());
    /// ```
    pub fn ended(
        scope: impl Into<Cow<'static, str>>,
        device: Option<tch::Device>,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            ended: true,
            ..Self::new(scope, device, reason)
        }
    }

    /// Whether the scope was entered and then ended the body itself
    /// ([`ended`](Self::ended)), rather than failing to enter.
    ///
    /// ```no_run
    /// assert!(!tch_scope::ScopeError::new("device(3)", None, "no CUDA").is_ended());
    /// ```
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// The scope that failed, as written (`"device(3)"`, `"inference_mode"`).
    ///
    /// ```no_run
    /// let e = tch_scope::ScopeError::new("no_grad", None, "x");
    /// assert_eq!(e.scope(), "no_grad");
    /// ```
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The device involved, if any.
    ///
    /// ```no_run
    /// let e = tch_scope::ScopeError::new("device(1)", Some(tch::Device::Cuda(1)), "x");
    /// assert_eq!(e.device(), Some(tch::Device::Cuda(1)));
    /// ```
    pub fn device(&self) -> Option<tch::Device> {
        self.device
    }

    /// Why it failed.
    ///
    /// ```no_run
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

mod sealed {
    pub trait Sealed {}
    impl Sealed for std::convert::Infallible {}
    impl Sealed for super::ScopeError {}
}

/// The error type of a [`Scope`](crate::Scope)'s entry: [`Infallible`] for
/// scopes that cannot fail (`no_grad`, `timed`, …), [`ScopeError`] for the
/// others (`device(3)` on a one-GPU machine). It is a property of the
/// type, so an attribute of an infallible scope puts no bound on the
/// function's return type. Implemented for these two types only.
///
/// ```
/// use std::convert::Infallible;
/// use tch_scope::{EntryError, NoGrad, OnDevice, Scope, ScopeError};
/// fn can_fail<S: Scope>(_: &S) -> bool { <S::Error as EntryError>::CAN_FAIL }
/// assert!(!can_fail(&NoGrad));
/// assert!(can_fail(&OnDevice::new(tch::Device::Cpu)));
/// ```
pub trait EntryError: sealed::Sealed + fmt::Debug + Sized + 'static {
    /// Whether a value of this type can exist (`false` for `Infallible`).
    const CAN_FAIL: bool;

    /// The error of two scopes entered one after the other: `Infallible`
    /// only if both are.
    type Or<B: EntryError>: EntryError;

    /// As a [`ScopeError`] (never called for `Infallible`).
    fn into_scope_error(self) -> ScopeError;

    /// `self` as the error of a pair whose other half's error is `B`.
    fn or<B: EntryError>(self) -> Self::Or<B>;

    /// `b` as the error of a pair whose first half's error is `Self`.
    fn or_from<B: EntryError>(b: B) -> Self::Or<B>;

    /// What an adapter over a scope with this error yields for a value
    /// `T` ([`ScopeFutureExt::in_scope`](crate::ScopeFutureExt::in_scope),
    /// [`ScopeIterExt::in_scope`](crate::ScopeIterExt::in_scope)): `T`
    /// itself when entering cannot fail, `Result<T, ScopeError>` otherwise
    /// — so nobody unwraps what cannot fail.
    type Output<T>;

    /// `r` as [`Self::Output`].
    fn output<T>(r: Result<T, Self>) -> Self::Output<T>;
}

impl EntryError for Infallible {
    const CAN_FAIL: bool = false;
    type Or<B: EntryError> = B;

    fn into_scope_error(self) -> ScopeError {
        match self {}
    }

    fn or<B: EntryError>(self) -> B {
        match self {}
    }

    #[inline(always)]
    fn or_from<B: EntryError>(b: B) -> B {
        b
    }

    type Output<T> = T;

    #[inline(always)]
    fn output<T>(r: Result<T, Infallible>) -> T {
        match r {
            Ok(v) => v,
            Err(e) => match e {},
        }
    }
}

impl EntryError for ScopeError {
    const CAN_FAIL: bool = true;
    type Or<B: EntryError> = ScopeError;

    #[inline(always)]
    fn into_scope_error(self) -> ScopeError {
        self
    }

    #[inline(always)]
    fn or<B: EntryError>(self) -> ScopeError {
        self
    }

    #[inline(always)]
    fn or_from<B: EntryError>(b: B) -> ScopeError {
        b.into_scope_error()
    }

    type Output<T> = Result<T, ScopeError>;

    #[inline(always)]
    fn output<T>(r: Result<T, ScopeError>) -> Result<T, ScopeError> {
        r
    }
}

impl From<Infallible> for ScopeError {
    fn from(e: Infallible) -> Self {
        match e {}
    }
}

#[cfg(test)]
mod tests {
    use super::ScopeError;

    #[test]
    fn an_entry_error_names_scope_and_device_an_ended_one_says_what_happened() {
        let e = ScopeError::new("my_scope", None, "already closed");
        assert_eq!(e.to_string(), "cannot enter `my_scope`: already closed");
        assert_eq!(
            (e.scope(), e.device(), e.reason()),
            ("my_scope", None, "already closed")
        );
        assert!(!e.is_ended());

        let e = ScopeError::new("device(1)", Some(tch::Device::Cuda(1)), "x");
        assert_eq!(e.device(), Some(tch::Device::Cuda(1)));
        assert_eq!(e.to_string(), "cannot enter `device(1)` on cuda:1: x");

        let why = "deadline of 100 ms exceeded after 103 ms at aten::mm";
        let e = ScopeError::ended("deadline(100 ms)", None, why);
        assert_eq!(e.to_string(), why);
        assert_eq!((e.scope(), e.reason()), ("deadline(100 ms)", why));
        assert!(e.is_ended());
    }
}
