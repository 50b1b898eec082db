//! `eval(model)` and `train(model)`: a model's train/eval mode for a scope,
//! like the `model.eval()` … `model.train(was_training)` pattern of PyTorch.
//!
//! A model's mode is state of the model, not of the thread: the guard holds
//! a shared borrow of the model and puts back, on every exit, exactly the
//! modes it found — for a TorchScript module, each submodule's own flag.

use std::rc::Rc;
use std::sync::Arc;

use tch::TchError;

use crate::{Scope, ScopeError};

/// A model with a train/eval mode that can be read, set and restored.
///
/// The methods take `&self` (the mode lives behind interior mutability, as
/// in [`tch::CModule`]'s C++ object or [`WithMode`](crate::WithMode)'s
/// flag), so a scope holds only a shared borrow and the body can go on
/// using the model: `scoped!(eval(model) => model.forward_ts(&[&x]))`.
///
/// Implemented for [`tch::CModule`] and [`tch::TrainableCModule`] (every
/// submodule's flag is saved and restored), for
/// [`WithMode`](crate::WithMode) (any `tch::nn::ModuleT` with a stored
/// mode), and through `&T`, `&mut T`, `Box<T>`, `Rc<T>` and `Arc<T>`. Your
/// own model types can implement it:
///
/// ```
/// use std::cell::Cell;
/// use tch::TchError;
/// use tch_scope::{Trainable, scoped};
///
/// struct Net {
///     training: Cell<bool>,
/// }
///
/// impl Trainable for Net {
///     type Modes = bool;
///     fn modes(&self) -> Result<bool, TchError> {
///         Ok(self.training.get())
///     }
///     fn set_training(&self, on: bool) -> Result<(), TchError> {
///         self.training.set(on);
///         Ok(())
///     }
///     fn restore_modes(&self, modes: bool) -> Result<(), TchError> {
///         self.training.set(modes);
///         Ok(())
///     }
/// }
///
/// let net = Net { training: Cell::new(true) };
/// let inside = scoped!(eval(net) => net.training.get());
/// assert!(!inside);
/// assert!(net.training.get()); // restored
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no train/eval mode: it does not implement `tch_scope::Trainable`",
    label = "`eval(…)` and `train(…)` need a model that implements `tch_scope::Trainable`",
    note = "a `tch::CModule` is `Trainable`; wrap a `tch::nn` module in `tch_scope::WithMode::new(module)` to give it a mode, or implement `tch_scope::Trainable` for `{Self}` (`modes`, `set_training`, `restore_modes`)"
)]
pub trait Trainable {
    /// A snapshot of the model's modes: a `bool` for a single flag, one per
    /// submodule for a TorchScript module.
    type Modes;

    /// The current modes, to be put back later by
    /// [`restore_modes`](Trainable::restore_modes).
    ///
    /// # Errors
    /// A [`TchError`] if the modes can't be read.
    fn modes(&self) -> Result<Self::Modes, TchError>;

    /// Switches the model, all of it, to training (`true`) or eval mode
    /// (`false`), like PyTorch's `model.train(on)`.
    ///
    /// # Errors
    /// A [`TchError`] if the mode can't be set.
    fn set_training(&self, on: bool) -> Result<(), TchError>;

    /// Puts back exactly the modes `modes` recorded.
    ///
    /// # Errors
    /// A [`TchError`] if they can't be put back.
    fn restore_modes(&self, modes: Self::Modes) -> Result<(), TchError>;

    /// Saves the current modes and switches to `on`, what a scope does on
    /// entry. The default calls [`modes`](Trainable::modes) then
    /// [`set_training`](Trainable::set_training), putting the saved modes
    /// back if the switch fails; override it when both can be done in one
    /// step ([`tch::CModule`] walks its submodules once instead of twice).
    ///
    /// # Errors
    /// A [`TchError`] if the modes can't be read or set; the model is then
    /// left as it was.
    ///
    /// ```
    /// use tch_scope::{Trainable, WithMode};
    /// let m = WithMode::new(tch::nn::func(|x| x.relu()));
    /// let was = m.switch_training(false).unwrap();
    /// assert!(was && !m.is_training());
    /// ```
    fn switch_training(&self, on: bool) -> Result<Self::Modes, TchError> {
        let modes = self.modes()?;
        match self.set_training(on) {
            Ok(()) => Ok(modes),
            Err(e) => {
                let _ = self.restore_modes(modes);
                Err(e)
            }
        }
    }
}

macro_rules! forward_trainable {
    ($($ty:ty),*) => {$(
        impl<T: Trainable + ?Sized> Trainable for $ty {
            type Modes = T::Modes;

            #[inline]
            fn modes(&self) -> Result<T::Modes, TchError> {
                (**self).modes()
            }

            #[inline]
            fn set_training(&self, on: bool) -> Result<(), TchError> {
                (**self).set_training(on)
            }

            #[inline]
            fn restore_modes(&self, modes: T::Modes) -> Result<(), TchError> {
                (**self).restore_modes(modes)
            }

            #[inline]
            fn switch_training(&self, on: bool) -> Result<T::Modes, TchError> {
                (**self).switch_training(on)
            }

        }
    )*};
}
forward_trainable!(&T, &mut T, Box<T>, Rc<T>, Arc<T>);

/// The `eval(model)` and `train(model)` scopes: the model switched to eval
/// or training mode, and its previous modes put back on exit.
///
/// `eval` does not turn autograd off: write `no_grad, eval(model)` for
/// that, as in PyTorch.
///
/// ```
/// use tch_scope::{Mode, Scope, Trainable, WithMode};
/// let vs = tch::nn::VarStore::new(tch::Device::Cpu);
/// let model = WithMode::new(tch::nn::linear(vs.root(), 2, 2, Default::default()));
/// let guard = Mode::eval(&model).enter().unwrap();
/// assert!(!model.is_training());
/// drop(guard);
/// assert!(model.is_training());
/// ```
pub struct Mode<'a, T: ?Sized> {
    model: &'a T,
    training: bool,
}

impl<'a, T: ?Sized> Mode<'a, T> {
    /// `model` in eval mode for the scope.
    ///
    /// ```
    /// # use tch_scope::{Mode, Scope, WithMode};
    /// let model = WithMode::new(tch::nn::func(|x| x.shallow_clone()));
    /// let _g = Mode::eval(&model).enter().unwrap();
    /// assert!(!model.is_training());
    /// ```
    pub fn eval(model: &'a T) -> Self {
        Self {
            model,
            training: false,
        }
    }

    /// `model` in training mode for the scope.
    ///
    /// ```
    /// # use tch_scope::{Mode, Scope, Trainable, WithMode};
    /// let model = WithMode::new(tch::nn::func(|x| x.shallow_clone()));
    /// model.set_training(false).unwrap();
    /// let _g = Mode::train(&model).enter().unwrap();
    /// assert!(model.is_training());
    /// ```
    pub fn train(model: &'a T) -> Self {
        Self {
            model,
            training: true,
        }
    }

    fn word(&self) -> &'static str {
        if self.training { "train" } else { "eval" }
    }
}

impl<T: ?Sized> Clone for Mode<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized> Copy for Mode<'_, T> {}

impl<T: ?Sized> std::fmt::Debug for Mode<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mode")
            .field("training", &self.training)
            .finish_non_exhaustive()
    }
}

impl<'a, T: Trainable + ?Sized> Scope for Mode<'a, T> {
    type Guard = ModeGuard<'a, T>;
    type Error = ScopeError;

    fn enter(&mut self) -> Result<ModeGuard<'a, T>, ScopeError> {
        // On failure `switch_training` leaves the model as it was.
        let saved = self
            .model
            .switch_training(self.training)
            .map_err(|e| ScopeError::new(self.word(), None, e.to_string()))?;
        Ok(ModeGuard {
            model: self.model,
            saved: Some(saved),
            word: self.word(),
        })
    }
}

/// Puts the model's modes found on entry back when dropped. Holds a shared
/// borrow of the model, so the scope's body can use the model too. Never
/// panics: if the modes can't be put back, it tells the exit hook
/// ([`set_exit_hook`](crate::set_exit_hook)).
///
/// ```
/// use tch_scope::{Mode, ModeGuard, Scope, Trainable, WithMode};
/// let model = WithMode::new(tch::nn::func(|x| x.relu()));
/// let guard: ModeGuard<'_, _> = Mode::eval(&model).enter().unwrap();
/// let y = model.forward(&tch::Tensor::ones([2], (tch::Kind::Float, tch::Device::Cpu)));
/// drop(guard);
/// assert!(model.is_training());
/// # let _ = y;
/// ```
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
pub struct ModeGuard<'a, T: Trainable + ?Sized> {
    model: &'a T,
    saved: Option<T::Modes>,
    /// `eval` or `train`, for an exit error.
    word: &'static str,
}

impl<T: Trainable + ?Sized> std::fmt::Debug for ModeGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModeGuard").finish_non_exhaustive()
    }
}

impl<T: Trainable + ?Sized> Drop for ModeGuard<'_, T> {
    fn drop(&mut self) {
        let Some(saved) = self.saved.take() else {
            return;
        };
        // Never panic in drop (it may run during unwinding): a failure goes
        // to the exit hook.
        if let Err(e) = self.model.restore_modes(saved) {
            crate::exit::report(
                self.word,
                format_args!("could not restore the model's train/eval modes: {e}"),
            );
        }
    }
}
