//! The one error type of tch-scope, and [`EntryError`]: whether a scope's
//! entry can fail at all.

use std::borrow::Cow;
use std::convert::Infallible;
use std::fmt;

/// Why a scope could not be entered, or a model loaded or run: which
/// scope (or model), on which device, and why.
///
/// Returned by [`Scope::enter`](crate::Scope::enter) of the scopes that can
/// fail and by [`try_scoped!`](crate::try_scoped). An attribute on a
/// function returning `Result<_, E>` returns `Err(E::from(e))` where
/// `E: From<ScopeError>`, and panics with this message otherwise. Loading
/// and running a model (`aoti::Package`, `batch::cmodule_forward`: modules
/// above this one, so named without a link) fail with it too, and say so: "cannot load …", "cannot run …" ([`Stage`]).
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
    stage: Stage,
}

/// What failed: entering a scope, a scope's body ended by the scope's own
/// failure, loading a model, or running one. Each has its own message.
///
/// ```
/// use tch_scope::{ScopeError, Stage};
/// let e = ScopeError::run("model.pt2", Some(tch::Device::Cpu), "input 0 is Double");
/// assert_eq!(e.stage(), Stage::Run);
/// assert_eq!(e.to_string(), "cannot run `model.pt2` on cpu: input 0 is Double");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Stage {
    /// The scope could not be entered ([`ScopeError::new`]): "cannot enter
    /// `scope` on device: reason".
    Enter,
    /// The scope was entered, then ended the body by a failure of its own
    /// ([`ScopeError::ended`]): the reason alone.
    Ended,
    /// A model could not be loaded ([`ScopeError::load`]): "cannot load
    /// `model` on device: reason".
    Load,
    /// A loaded model could not run ([`ScopeError::run`]): "cannot run
    /// `model` on device: reason".
    Run,
}

/// "cannot enter `scope` on dev: reason" (or load, or run), or the reason
/// alone for a scope that ended in failure (it says what happened:
/// "deadline of 100 ms exceeded after 103 ms at aten::mm").
struct Message<'a>(&'a ScopeError);

impl fmt::Display for Message<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        let verb = match e.stage {
            Stage::Ended => return f.write_str(&e.reason),
            Stage::Enter => "enter",
            Stage::Load => "load",
            Stage::Run => "run",
        };
        write!(
            f,
            "cannot {verb} `{}`{}: {}",
            e.scope,
            OnDevice(e.device),
            e.reason
        )
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
            stage: Stage::Enter,
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
            stage: Stage::Ended,
            ..Self::new(scope, device, reason)
        }
    }

    /// An error for a model that could not be loaded: `model` names it (its
    /// file, as the user gave it), `device` is the one it was to be loaded
    /// on, if known.
    ///
    /// ```no_run
    /// let e = tch_scope::ScopeError::load("/models/mlp.pt2", None, "no such file");
    /// assert_eq!(e.to_string(), "cannot load `/models/mlp.pt2`: no such file");
    /// ```
    pub fn load(
        model: impl Into<Cow<'static, str>>,
        device: Option<tch::Device>,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            stage: Stage::Load,
            ..Self::new(model, device, reason)
        }
    }

    /// An error for a loaded model that could not run on its inputs:
    /// `model` names it (its file, or the forward that failed), `device` is
    /// the one it runs on, if known.
    ///
    /// ```no_run
    /// let e = tch_scope::ScopeError::run("CModule::forward", None, "mat1 and mat2 shapes cannot be multiplied");
    /// assert_eq!(e.to_string(), "cannot run `CModule::forward`: mat1 and mat2 shapes cannot be multiplied");
    /// ```
    pub fn run(
        model: impl Into<Cow<'static, str>>,
        device: Option<tch::Device>,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            stage: Stage::Run,
            ..Self::new(model, device, reason)
        }
    }

    /// Whether the scope was entered and then ended the body itself
    /// ([`ended`](Self::ended)), rather than failing to enter.
    ///
    /// ```no_run
    /// assert!(!tch_scope::ScopeError::new("device(3)", None, "no CUDA").is_ended());
    /// ```
    pub fn is_ended(&self) -> bool {
        self.stage == Stage::Ended
    }

    /// What failed: entering the scope, the scope's own end, loading or
    /// running a model.
    ///
    /// ```no_run
    /// use tch_scope::{ScopeError, Stage};
    /// assert_eq!(ScopeError::new("no_grad", None, "x").stage(), Stage::Enter);
    /// assert_eq!(ScopeError::load("m.pt2", None, "x").stage(), Stage::Load);
    /// ```
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// The scope that failed, as written (`"device(3)"`, `"inference_mode"`);
    /// for a load or a run, the model: its file (`"/models/mlp.pt2"`) or
    /// the forward (`"CModule::forward"`).
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
    use super::{ScopeError, Stage};

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
        assert_eq!(e.stage(), Stage::Ended);
    }

    #[test]
    fn a_load_or_run_error_says_cannot_load_or_cannot_run() {
        let e = ScopeError::load("/m/mlp.pt2", None, "no such file");
        assert_eq!(e.to_string(), "cannot load `/m/mlp.pt2`: no such file");
        assert_eq!(
            (e.scope(), e.device(), e.reason(), e.stage()),
            ("/m/mlp.pt2", None, "no such file", Stage::Load)
        );
        assert!(!e.is_ended());

        let e = ScopeError::run(
            "/m/mlp.pt2",
            Some(tch::Device::Cuda(0)),
            "input 0 is Double",
        );
        assert_eq!(
            e.to_string(),
            "cannot run `/m/mlp.pt2` on cuda:0: input 0 is Double"
        );
        assert_eq!(e.stage(), Stage::Run);
        assert!(!e.is_ended());

        assert_eq!(ScopeError::new("x", None, "y").stage(), Stage::Enter);
    }
}
