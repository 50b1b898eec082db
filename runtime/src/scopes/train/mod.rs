//! `eval(model)` and `train(model)`: a model's train/eval mode for a scope,
//! like the `model.eval()` … `model.train(was_training)` pattern of PyTorch.
//!
//! A model's mode is state of the model, not of the thread: the guard holds
//! a shared borrow of the model, and the last scope open on the model puts
//! back exactly the modes found before the first — for a TorchScript
//! module, each submodule's own flag.
//!
//! # Models shared between threads
//! Scopes on one model from several threads share its mode (a count per
//! model): two `eval(model)` scopes on an `Arc<CModule>` from two threads
//! may end in any order, and the modes come back after the last. A scope
//! asking for the other mode while another thread holds the model is
//! refused at entry with a [`ScopeError`] (`train(model) conflicts with
//! eval(model) held by thread worker-1`). Within one thread, scopes nest
//! as always: `train(model) => { eval(model) => … }`.
//!
//! The mode is flags *in the model*, which every forward pass reads. So a
//! scope on a model that another thread runs **outside any scope** is a
//! race: that thread's forward passes switch to eval (or back) in the
//! middle of its work, and a training step may run with dropout off and
//! BatchNorm statistics frozen, or an inference request with dropout on.
//! No lock can fix that, because the other thread takes none. For a model
//! served by many threads, put it in eval mode once and keep it there:
//! [`Inference`](crate::Inference) does, and runs each call under
//! `inference_mode` with no flag written per call.

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

    /// Which model this is, for the scopes that share it between threads:
    /// two values with the same id are one model. The default, the
    /// address of `self`, is right for a model that is not a handle to
    /// another; `&T`, `Box<T>`, `Rc<T>` and `Arc<T>` give their target's.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tch_scope::{Trainable, WithMode};
    /// let m = Arc::new(WithMode::new(tch::nn::func(|x| x.relu())));
    /// assert_eq!(m.model_id(), Arc::clone(&m).model_id());
    /// ```
    fn model_id(&self) -> usize {
        std::ptr::from_ref(self).cast::<()>() as usize
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

            #[inline]
            fn model_id(&self) -> usize {
                (**self).model_id()
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

impl<'a, T: Trainable + ?Sized> Scope for Mode<'a, T>
where
    T::Modes: Send + 'static,
{
    type Guard = ModeGuard<'a, T>;
    type Error = ScopeError;

    /// # Errors
    /// Another thread holds the model in the other mode, or the modes
    /// can't be read or set (the model is then left as it was).
    #[inline]
    fn enter(&mut self) -> Result<ModeGuard<'a, T>, ScopeError> {
        let id = self.model.model_id();
        let (ticket, kept) =
            models::enter(self.model, id, self.training).map_err(|e| refused(self.word(), e))?;
        debug_assert!(ticket & TRAINING == 0, "tickets stay below bit 62");
        Ok(ModeGuard {
            _not_send: crate::PhantomNotSend::NEW,
            model: self.model,
            ticket: ticket | if self.training { TRAINING } else { 0 },
            kept,
            fns: models::fns::<T>(),
        })
    }

    /// A task holding the scope suspends: its entry is active on no thread.
    fn suspend(guard: &mut ModeGuard<'a, T>) {
        models::step(guard.model.model_id(), guard.ticket(), 0);
    }

    /// The task is polled on this thread: its entry is active here.
    fn resume(guard: &mut ModeGuard<'a, T>) {
        models::step(guard.model.model_id(), guard.ticket(), crate::lease::me());
    }
}

/// Leaves the model's mode scope when dropped; the last guard of all
/// those open on the model (on any thread, in any order) puts back the
/// modes found before the first — for a TorchScript module each
/// submodule's own flag. Holds a shared borrow of the model, so the
/// scope's body can use the model too. Never panics: if the modes can't
/// be put back, it tells the exit hook
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
    /// Its thread's hold on the model's mode (see `process_wide::Held`).
    _not_send: crate::PhantomNotSend,
    model: &'a T,
    /// The entry's ticket, and [`TRAINING`] for a `train` scope (for an
    /// exit error). The model's id is asked again when needed: a guard
    /// that moves in fewer words costs less to move.
    ticket: u64,
    /// The modes before the first scope on the model, when this guard's
    /// scope saved them and keeps them (no record holds them then).
    kept: Option<T::Modes>,
    /// How to keep such modes for the last scope and put saved modes back
    /// (for `Drop`, which cannot name the bounds).
    fns: models::Fns<T>,
}

/// In [`ModeGuard`]'s ticket: a `train` scope. Tickets count up from 1 (or
/// are a lane's, bit 63 over a slot number): never this high.
const TRAINING: u64 = 1 << 62;

impl<T: Trainable + ?Sized> ModeGuard<'_, T> {
    fn ticket(&self) -> u64 {
        self.ticket & !TRAINING
    }
}

impl<T: Trainable + ?Sized> std::fmt::Debug for ModeGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModeGuard").finish_non_exhaustive()
    }
}

impl<T: Trainable + ?Sized> Drop for ModeGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Never panic in drop (it may run during unwinding): a failure goes
        // to the exit hook.
        let kept = self.kept.take();
        let id = self.model.model_id();
        if let Err(e) = models::leave(self.model, id, self.ticket(), kept, self.fns) {
            not_restored(
                if self.ticket & TRAINING != 0 {
                    "train"
                } else {
                    "eval"
                },
                &e,
            );
        }
    }
}

#[cold]
#[inline(never)]
fn refused(word: &'static str, e: String) -> ScopeError {
    ScopeError::new(word, None, e)
}

#[cold]
#[inline(never)]
fn not_restored(word: &'static str, e: &TchError) {
    crate::exit::report(
        word,
        format_args!("could not restore the model's train/eval modes: {e}"),
    );
}

mod models;
mod saved;
#[cfg(test)]
mod tests;

pub(crate) use models::refuse_served;

/// An [`Inference`](crate::Inference)'s hold on its model's mode.
pub(crate) fn serve<T: Trainable + ?Sized>(model: &T) -> Result<(), ScopeError>
where
    T::Modes: Send + 'static,
{
    models::serve(model, model.model_id()).map_err(|e| ScopeError::new("Inference::new", None, e))
}

/// Ends [`serve`]'s hold; the modes come back after the last hold.
pub(crate) fn unserve<T: Trainable + ?Sized>(model: &T) -> Result<(), TchError>
where
    T::Modes: Send + 'static,
{
    models::unserve(model, model.model_id(), models::restore::<T>)
}

// SAFETY: its thread-bound part is its entry's thread in the model's
// registry record, which is what a `Spanned` future moving it steps with
// it; the model is shared by reference, so it must be `Sync`.
unsafe impl<T: Trainable + Sync + ?Sized> crate::process_wide::MovesWithTask for ModeGuard<'_, T> {}
