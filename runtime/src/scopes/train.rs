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
    fn enter(&mut self) -> Result<ModeGuard<'a, T>, ScopeError> {
        let id = self.model.model_id();
        let ticket = models::enter(self.model, id, self.training)
            .map_err(|e| ScopeError::new(self.word(), None, e))?;
        Ok(ModeGuard {
            _not_send: crate::PhantomNotSend::NEW,
            model: self.model,
            id,
            ticket,
            restore: models::restore::<T>,
            word: self.word(),
        })
    }

    /// A task holding the scope suspends: its entry is active on no thread.
    fn suspend(guard: &mut ModeGuard<'a, T>) {
        models::step(guard.id, guard.ticket, 0);
    }

    /// The task is polled on this thread: its entry is active here.
    fn resume(guard: &mut ModeGuard<'a, T>) {
        models::step(guard.id, guard.ticket, crate::process_wide::me());
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
    id: usize,
    ticket: u64,
    /// Puts the saved modes (of the first scope on the model) back.
    restore: models::Restore<T>,
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
        // Never panic in drop (it may run during unwinding): a failure goes
        // to the exit hook.
        if let Err(e) = models::leave(self.model, self.id, self.ticket, self.restore) {
            crate::exit::report(
                self.word,
                format_args!("could not restore the model's train/eval modes: {e}"),
            );
        }
    }
}

/// The open mode scopes of every model, by [`Trainable::model_id`]: per
/// model, the modes before the first scope and the scopes open, oldest
/// first. Like the process-wide words: scopes of one thread nest (the
/// newest mode applies), scopes of two threads share one mode, and a
/// scope asking for the other mode while another thread holds the model
/// is refused; the last to end puts the saved modes back. The models are
/// spread over 64 locks by id, so scopes on different models seldom wait
/// for each other.
mod models {
    use std::any::Any;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Mutex, PoisonError};

    use tch::TchError;

    use super::Trainable;
    use crate::process_wide::{me, thread_label};

    struct Open {
        ticket: u64,
        holder: u64,
        training: bool,
        /// The thread that entered it, or that polled its task last.
        thread: u64,
        /// The thread it is active on (0: a suspended task's).
        active_on: u64,
    }

    struct Model {
        id: usize,
        saved: Box<dyn Any + Send>,
        open: Vec<Open>,
        /// Ticket ids; a new holder is named by its first ticket's id.
        next: u64,
        /// [`Inference`](crate::Inference)s serving the model: while one
        /// does, the model stays in eval mode (no `train` scope, no
        /// direct switch), and its modes come back after the last.
        served: usize,
    }

    /// The ids of served models, for the direct switches
    /// ([`refuse_served`]) that do not go through the stripes; `SERVING`
    /// counts them, so a process serving nothing takes no lock there.
    static SERVED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    static SERVING: AtomicUsize = AtomicUsize::new(0);

    fn served_list() -> std::sync::MutexGuard<'static, Vec<usize>> {
        SERVED.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses a direct mode switch (`set_training`, `restore_modes`) on a
    /// model an [`Inference`](crate::Inference) serves: other threads run
    /// it, and the write would race their forward passes.
    pub(crate) fn refuse_served(id: usize, what: &str) -> Result<(), TchError> {
        if SERVING.load(Ordering::Acquire) == 0 || !served_list().contains(&id) {
            return Ok(());
        }
        Err(TchError::Torch(format!(
            "{what} refused: the model is served by an `Inference`, which keeps it in eval \
             mode while other threads may run it (take it back with `Inference::into_inner`)"
        )))
    }

    const STRIPES: usize = 64;

    static MODELS: [Mutex<Vec<Model>>; STRIPES] = [const { Mutex::new(Vec::new()) }; STRIPES];

    fn stripe(id: usize) -> std::sync::MutexGuard<'static, Vec<Model>> {
        // Models are at least 8-aligned: mix the low bits away.
        let i = (id >> 4 ^ id >> 10) % STRIPES;
        MODELS[i].lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn word(training: bool) -> &'static str {
        if training {
            "train(model)"
        } else {
            "eval(model)"
        }
    }

    pub(super) fn enter<T: Trainable + ?Sized>(
        model: &T,
        id: usize,
        training: bool,
    ) -> Result<u64, String>
    where
        T::Modes: Send + 'static,
    {
        let me_id = me();
        let mut models = stripe(id);
        let Some(m) = models.iter_mut().find(|m| m.id == id) else {
            let saved = model.switch_training(training).map_err(|e| e.to_string())?;
            models.push(Model {
                id,
                saved: Box::new(saved),
                open: vec![Open {
                    ticket: 1,
                    holder: 1,
                    training,
                    thread: me_id,
                    active_on: me_id,
                }],
                next: 2,
                served: 0,
            });
            return Ok(1);
        };
        if training && m.served > 0 {
            return Err(format!(
                "{} refused: the model is served by an `Inference`, which keeps it in eval mode \
                 while other threads may run it (take it back with `Inference::into_inner` first)",
                word(training)
            ));
        }
        let ticket = m.next;
        let holder = m
            .open
            .iter()
            .rev()
            .find(|o| o.active_on == me_id)
            .map_or(ticket, |o| o.holder);
        if let Some(o) = m
            .open
            .iter()
            .rev()
            .find(|o| o.holder != holder && o.training != training)
        {
            return Err(format!(
                "{} conflicts with {} held by {}",
                word(training),
                word(o.training),
                thread_label(o.thread)
            ));
        }
        if m.open.last().is_some_and(|o| o.training != training) {
            model.set_training(training).map_err(|e| e.to_string())?;
        }
        m.next += 1;
        m.open.push(Open {
            ticket,
            holder,
            training,
            thread: me_id,
            active_on: me_id,
        });
        Ok(ticket)
    }

    /// Moves the entry of `ticket` onto the thread `to` (0: none).
    pub(super) fn step(id: usize, ticket: u64, to: u64) {
        let mut models = stripe(id);
        let open = models
            .iter_mut()
            .find(|m| m.id == id)
            .and_then(|m| m.open.iter_mut().find(|o| o.ticket == ticket));
        if let Some(o) = open {
            o.active_on = to;
            if to != 0 {
                o.thread = to;
            }
        }
    }

    pub(super) type Restore<T> = fn(&T, Box<dyn Any + Send>) -> Result<(), TchError>;

    pub(super) fn restore<T: Trainable + ?Sized>(
        model: &T,
        saved: Box<dyn Any + Send>,
    ) -> Result<(), TchError>
    where
        T::Modes: Send + 'static,
    {
        match saved.downcast::<T::Modes>() {
            Ok(saved) => model.restore_modes(*saved),
            Err(_) => Err(TchError::Torch(
                "the model's saved modes are of another type than this handle's".into(),
            )),
        }
    }

    pub(super) fn leave<T: Trainable + ?Sized>(
        model: &T,
        id: usize,
        ticket: u64,
        restore: Restore<T>,
    ) -> Result<(), TchError> {
        let mut models = stripe(id);
        let Some(k) = models.iter().position(|m| m.id == id) else {
            return Ok(());
        };
        let m = &mut models[k];
        let Some(i) = m.open.iter().rposition(|o| o.ticket == ticket) else {
            return Ok(());
        };
        let newest = i + 1 == m.open.len();
        let gone = m.open.remove(i);
        match m.open.last() {
            Some(o) if newest && o.training != gone.training => model.set_training(o.training),
            Some(_) => Ok(()),
            // Still served: it stays in eval mode, as it is.
            None if m.served > 0 => Ok(()),
            None => restore(model, models.swap_remove(k).saved),
        }
    }

    /// An [`Inference`](crate::Inference) begins serving the model: it is
    /// put in eval mode (unless scopes already hold it there), and kept
    /// there until [`unserve`].
    pub(super) fn serve<T: Trainable + ?Sized>(model: &T, id: usize) -> Result<(), String>
    where
        T::Modes: Send + 'static,
    {
        let mut models = stripe(id);
        match models.iter_mut().find(|m| m.id == id) {
            Some(m) => {
                if let Some(o) = m.open.iter().rev().find(|o| o.training) {
                    return Err(format!(
                        "the model is in a `train(model)` scope held by {}: a served model must \
                         stay in eval mode, so end that scope first",
                        thread_label(o.thread)
                    ));
                }
                m.served += 1;
            }
            None => {
                let saved = model.switch_training(false).map_err(|e| e.to_string())?;
                models.push(Model {
                    id,
                    saved: Box::new(saved),
                    open: Vec::new(),
                    next: 1,
                    served: 1,
                });
            }
        }
        served_list().push(id);
        SERVING.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// An [`Inference`](crate::Inference) stops serving the model: after
    /// the last (and the last scope), its modes before the first come back.
    pub(super) fn unserve<T: Trainable + ?Sized>(
        model: &T,
        id: usize,
        restore: Restore<T>,
    ) -> Result<(), TchError> {
        let mut models = stripe(id);
        {
            let mut list = served_list();
            if let Some(i) = list.iter().position(|&s| s == id) {
                list.swap_remove(i);
                SERVING.fetch_sub(1, Ordering::Release);
            }
        }
        let Some(k) = models.iter().position(|m| m.id == id) else {
            return Ok(());
        };
        let m = &mut models[k];
        m.served = m.served.saturating_sub(1);
        if m.served > 0 || !m.open.is_empty() {
            return Ok(());
        }
        restore(model, models.swap_remove(k).saved)
    }
}

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
