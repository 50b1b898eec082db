//! Scoped execution for libtorch: PyTorch's context managers as Rust scopes.
//!
//! `torch.no_grad()`, `torch.inference_mode()`, `torch.cuda.device(n)` and
//! friends become RAII guards, function attributes and a block macro. Every
//! exit — end of block, `return`, `?`, `break`, panic — restores the state
//! exactly; nested scopes unwind in reverse order; async code re-enters its
//! scopes on every poll.
//!
//! ```
//! use tch::{Device, Kind, Tensor};
//! use tch_scope::{no_grad, scoped, is_grad_enabled};
//!
//! #[no_grad]
//! fn predict(w: &Tensor, x: &Tensor) -> Tensor {
//!     assert!(!is_grad_enabled());
//!     x.matmul(w)
//! }
//!
//! let w = Tensor::ones([3, 2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
//! let x = Tensor::ones([4, 3], (Kind::Float, Device::Cpu));
//! assert!(!predict(&w, &x).requires_grad());
//!
//! let y = scoped!(no_grad, device(cpu) => { x.matmul(&w) });
//! assert!(!y.requires_grad());
//! assert!(is_grad_enabled()); // restored
//! ```
//!
//! # Scope words
//! One grammar serves [`scoped!`], [`try_scoped!`] and the attributes: a
//! comma-separated list of words, each `name`, `name(args)`, optionally
//! followed by `if cond` (entered only when `cond` holds). The first word is
//! the outermost scope.
//!
//! | word | PyTorch | guard |
//! |---|---|---|
//! | `no_grad` | `torch.no_grad()` | [`NoGrad`] |
//! | `enable_grad` | `torch.enable_grad()` | [`EnableGrad`] |
//! | `grad(flag)` | `torch.set_grad_enabled(flag)` | [`Grad`] |
//! | `inference_mode` | `torch.inference_mode()` | [`InferenceMode`] |
//! | `device(0)`, `device(cpu)`, `device("cuda:1")`, `device(expr)` | `torch.cuda.device(n)` | [`OnDevice`] |
//! | `eval(model)` | `was = model.training; model.eval()` … `model.train(was)` | [`Mode`] |
//! | `train(model)` | `was = model.training; model.train()` … `model.train(was)` | [`Mode`] |
//! | `with(expr)` | `with expr:` | any [`Scope`] |
//!
//! `eval(model)` and `train(model)` take any [`Trainable`] model — a
//! [`tch::CModule`], a `tch::nn` module wrapped in [`WithMode`], or your own
//! type — and borrow it (shared) for the scope, so the body can still call
//! it. On exit every submodule's own mode is put back. `eval` does not turn
//! autograd off; write `no_grad, eval(model)`.
//!
//! # Attributes
//! Each word is also an attribute taking the same arguments (`#[no_grad]`,
//! `#[device(0)]`, `#[grad(training)]`); [`macro@scope`] takes a whole list.
//! (`#[scope(…)]` is not spelled `#[scoped(…)]` because Rust keeps one macro
//! namespace per crate: an attribute and the `scoped!` block macro cannot
//! share a name.) On a function returning `Result<_, E>`, a scope that
//! cannot be entered returns `Err(E::from(ScopeError))`; otherwise it panics
//! with the [`ScopeError`] message.
//!
//! # Threads
//! Grad mode, inference mode and the current device are per OS thread, as in
//! libtorch, so guards are `!Send`. A thread spawned inside `no_grad` starts
//! with grad mode on, as in PyTorch.

#![warn(missing_docs)]

mod cmodule;
mod device;
mod error;
mod ffi;
mod future;
mod grad;
mod scope;
mod tls;
mod train;
mod with_mode;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use device::{
    DeviceGuard, IntoScopeDevice, OnDevice, built_with_cuda, cuda_device_count,
    current_cuda_device, current_device,
};
pub use error::ScopeError;
pub use future::{ScopeFutureExt, Scoped};
pub use grad::{
    EnableGrad, Grad, GradGuard, InferenceMode, InferenceModeGuard, NoGrad, is_grad_enabled,
    is_inference_mode_enabled,
};
pub use scope::{Chain, ChainGuard, End, Scope, When};
pub use train::{Mode, ModeGuard, Trainable};
pub use with_mode::WithMode;

pub use tch_scope_macros::scoped as scope;
pub use tch_scope_macros::{device, enable_grad, eval, grad, inference_mode, no_grad, train, with};

/// Runs a block inside a list of scopes: `scoped!(SCOPES => BODY)`.
///
/// The body is a block or an expression, not a closure: `?`, `return`,
/// `break` and `continue` act on the enclosing function or loop. If a scope
/// cannot be entered, `scoped!` panics with the [`ScopeError`] message; use
/// [`try_scoped!`] to get it as a value. A body that `.await`s runs as its
/// own future whose scopes are entered on every poll; there `?` acts on the
/// body (making its value a `Result`) and `return`/`break`/`continue` out of
/// it are compile errors.
///
/// ```
/// use tch_scope::{scoped, is_grad_enabled};
/// for training in [true, false] {
///     let grad = scoped!(no_grad if !training => is_grad_enabled());
///     assert_eq!(grad, training);
/// }
/// ```
#[macro_export]
macro_rules! scoped {
    ($($tt:tt)*) => { $crate::__private::scoped_impl!{ $crate ; $($tt)* } };
}

/// Like [`scoped!`], but evaluates to `Result<T, ScopeError>` instead of
/// panicking when a scope cannot be entered.
///
/// ```
/// use tch_scope::try_scoped;
/// let r = try_scoped!(device("cuda:7") => 1 + 1);
/// if tch_scope::cuda_device_count() < 8 {
///     let e = r.unwrap_err();
///     assert_eq!(e.device(), Some(tch::Device::Cuda(7)));
/// }
/// ```
#[macro_export]
macro_rules! try_scoped {
    ($($tt:tt)*) => { $crate::__private::try_scoped_impl!{ $crate ; $($tt)* } };
}
