//! [`Inference`]: a model put in eval mode once, shared by many threads.

use std::mem::ManuallyDrop;

use tch::TchError;

use crate::scopes::train;
use crate::{InferenceMode, Scope, ScopeError, Trainable};

mod replicas;
pub use replicas::{ReplicaGuard, Replicas};

/// A model an [`Inference`] can serve: every [`Trainable`] model (whose
/// modes are `Send + 'static`: [`tch::CModule`], [`tch::TrainableCModule`],
/// [`WithMode`](crate::WithMode), your own), held in eval mode while
/// served, and an AOTInductor [`Package`](crate::aoti::Package), which has
/// no train/eval mode and is served as it is; and [`Replicas`] of either,
/// how a model that is `Send` but not `Sync` (a `tch::nn` module) is
/// served from many threads.
///
/// Sealed: a model type of your own is served by implementing
/// [`Trainable`] for it (a model without modes: `type Modes = ()`, and
/// methods that do nothing).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be served by `tch_scope::Inference`",
    label = "`Inference::new` needs a `Trainable` model (with `Send + 'static` modes) or an `aoti::Package`",
    note = "implement `tch_scope::Trainable` for `{Self}`, or wrap a `tch::nn` module in `tch_scope::WithMode::new(module)` (and, to serve it from many threads, in `tch_scope::Replicas`)"
)]
pub trait Servable: serve::Serve {}

impl<M: serve::Serve + ?Sized> Servable for M {}

mod serve {
    use super::{ScopeError, TchError, Trainable, train};

    /// What [`Inference`](crate::Inference) does to its model when it
    /// begins and ends serving it. Not nameable outside the crate, and its
    /// methods take a [`Token`] only the crate can make, so generic code
    /// bounded by `Servable` can't call them either.
    pub trait Serve {
        /// Puts the model in the mode it is served in, and holds it there.
        fn begin_serving(&self, _: Token) -> Result<(), ScopeError>;
        /// Ends [`begin_serving`](Serve::begin_serving)'s hold.
        fn end_serving(&self, _: Token) -> Result<(), TchError>;
    }

    /// Proof that the caller is this crate.
    #[derive(Debug, Clone, Copy)]
    pub struct Token(pub(super) ());

    impl<M: Trainable + ?Sized> Serve for M
    where
        M::Modes: Send + 'static,
    {
        fn begin_serving(&self, _: Token) -> Result<(), ScopeError> {
            train::serve(self)
        }

        fn end_serving(&self, _: Token) -> Result<(), TchError> {
            train::unserve(self)
        }
    }

    /// No modes: served as it is. Its runs are `&self` and thread-safe.
    impl Serve for crate::aoti::Package {
        fn begin_serving(&self, _: Token) -> Result<(), ScopeError> {
            Ok(())
        }

        fn end_serving(&self, _: Token) -> Result<(), TchError> {
            Ok(())
        }
    }
}

/// A model in eval mode for serving: every submodule is put in eval mode
/// once, by [`new`](Inference::new), and [`run`](Inference::run) calls the
/// model under `inference_mode` without writing any flag, so many threads
/// can share it in an `Arc` (it is `Send + Sync` for [`tch::CModule`],
/// for [`WithMode`](crate::WithMode) of a `Send + Sync` module, for an
/// AOTInductor [`Package`](crate::aoti::Package), and for [`Replicas`] of
/// any `Send` model: a `tch::nn` module trained in Rust, one replica per
/// thread, made by [`replicated`](Inference::replicated)).
///
/// Any [`Servable`] model: a [`Trainable`] one is held in eval mode as
/// below; a [`Package`](crate::aoti::Package) has no modes and is served
/// as it is (`Inference::new(pkg)?.run(|m| m.run(&[&x]))`).
///
/// This is the answer to a scope on a model that other threads run outside
/// any scope (a race on the model's flags, see [`Mode`](crate::Mode)): the
/// model's mode never changes while it is shared. The hold is kept in the
/// same registry as the `eval(..)` / `train(..)` scopes, so while an
/// `Inference` serves a model:
/// - a `train(model)` scope on it is a [`ScopeError`], inside
///   [`run`](Inference::run) and outside, on any thread;
/// - [`Trainable::set_training`] and [`Trainable::restore_modes`] on it
///   return an error for [`tch::CModule`], [`tch::TrainableCModule`] and
///   [`WithMode`](crate::WithMode) (your own [`Trainable`] types can call
///   nothing of the kind: keep them from switching while served);
/// - an `eval(model)` scope is allowed, and writes nothing;
/// - [`new`](Inference::new) is refused while a `train(model)` scope on the
///   model is open.
///
/// The model is kept in a `Box`, so its address, by which the registry
/// knows it ([`Trainable::model_id`]), does not change when the `Inference`
/// moves.
///
/// [`into_inner`](Inference::into_inner) gives the model back in the modes
/// it had before `new`.
///
/// ```
/// use std::sync::Arc;
/// use tch::{Device, Kind, Tensor, nn::ModuleT};
/// use tch_scope::{Inference, WithMode};
///
/// #[derive(Debug)]
/// struct Dropout; // a `Send + Sync` module
/// impl ModuleT for Dropout {
///     fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
///         x.dropout(0.5, train)
///     }
/// }
///
/// let model = WithMode::new(Dropout);
/// let served = Arc::new(Inference::new(model).unwrap());
/// let x = Tensor::ones([8], (Kind::Float, Device::Cpu));
/// let handles: Vec<_> = (0..4)
///     .map(|_| {
///         let (served, x) = (Arc::clone(&served), x.shallow_clone());
///         std::thread::spawn(move || served.run(|m| m.forward(&x)))
///     })
///     .collect();
/// for h in handles {
///     assert!(h.join().unwrap().equal(&x)); // eval: dropout is the identity
/// }
/// let model = Arc::into_inner(served).unwrap().into_inner();
/// assert!(model.is_training()); // as it was before
/// ```
#[derive(Debug)]
pub struct Inference<M: Servable> {
    /// Taken only by `into_inner`, which forgets `self` afterwards.
    model: ManuallyDrop<Box<M>>,
}

impl<M: Servable> Inference<M> {
    /// Puts every submodule of `model` in eval mode (once) and holds it
    /// there until the `Inference` is dropped or taken apart; a model
    /// without modes (an [`aoti::Package`](crate::aoti::Package)) is taken
    /// as it is.
    ///
    /// # Errors
    /// A [`ScopeError`] if a `train(model)` scope on the model is open, or
    /// the modes can't be read or set; the model is then left as it was
    /// (and dropped).
    pub fn new(model: M) -> Result<Self, ScopeError> {
        let model = Box::new(model);
        model.begin_serving(serve::Token(()))?;
        Ok(Self {
            model: ManuallyDrop::new(model),
        })
    }

    /// Runs `f` on the model under `inference_mode` (on this thread only:
    /// no shared state is written), whatever this thread's grad mode: its
    /// outputs are inference tensors, with no autograd graph (call the
    /// model through [`get_ref`](Inference::get_ref) for one).
    ///
    /// ```no_run
    /// use tch_scope::{Inference, WithMode};
    /// let served = Inference::new(WithMode::new(tch::nn::func(|x| x.relu()))).unwrap();
    /// assert!(served.run(|_| tch_scope::is_inference_mode_enabled()));
    /// ```
    pub fn run<R>(&self, f: impl FnOnce(&M) -> R) -> R {
        let Ok(_inference) = InferenceMode.enter();
        f(&self.model)
    }

    /// The model, still in eval mode, for reading (calling it outside
    /// `run` skips `inference_mode`).
    ///
    /// ```no_run
    /// use tch_scope::{Inference, Mode, Scope, WithMode};
    /// let served = Inference::new(WithMode::new(tch::nn::func(|x| x.relu()))).unwrap();
    /// assert!(!served.get_ref().is_training());
    /// // A served model stays in eval mode.
    /// assert!(Mode::train(served.get_ref()).enter().is_err());
    /// ```
    pub fn get_ref(&self) -> &M {
        &self.model
    }

    /// The model back, in the modes it had before [`new`](Inference::new)
    /// (unless `eval(..)` scopes on it are still open, or another
    /// `Inference` serves it: then after the last of them). A failure to
    /// put them back goes to the exit hook
    /// ([`set_exit_hook`](crate::set_exit_hook)), and the model comes back
    /// in eval mode.
    ///
    /// ```no_run
    /// use tch_scope::{Inference, Trainable, WithMode};
    /// let m = WithMode::new(tch::nn::func(|x| x.relu()));
    /// let m = Inference::new(m).unwrap().into_inner();
    /// assert!(m.is_training());
    /// ```
    pub fn into_inner(self) -> M {
        let mut this = ManuallyDrop::new(self);
        this.release();
        // SAFETY: taken once; `this` is never dropped, so the field is not
        // dropped twice.
        *unsafe { ManuallyDrop::take(&mut this.model) }
    }

    fn release(&self) {
        if let Err(e) = self.model.end_serving(serve::Token(())) {
            crate::exit::report(
                "Inference",
                format_args!("could not restore the model's train/eval modes: {e}"),
            );
        }
    }
}

impl<M: Servable> Inference<Replicas<M>> {
    /// Serves `n` replicas of a model that is `Send` but not `Sync` (a
    /// `tch::nn` module trained in Rust), each made by `factory(i)` on this
    /// thread: `Inference::new(Replicas::new(n, factory)?)`. Run it with
    /// `served.run(|r| r.get().forward(&x))`; give a
    /// [`Batcher`](crate::batch::Batcher) at least as many replicas as
    /// workers, and each worker keeps to its own.
    ///
    /// # Errors
    /// The [`Replicas::new`] error (none asked for, or the factory's), or
    /// [`new`](Inference::new)'s.
    ///
    /// ```no_run
    /// use tch::nn::{self, Module};
    /// use tch::{Device, Kind, Tensor};
    /// use tch_scope::{Inference, WithMode};
    ///
    /// let trained = nn::VarStore::new(Device::Cpu);
    /// let net = nn::linear(trained.root() / "fc", 4, 2, Default::default());
    /// // … train `net` …
    /// let served = Inference::replicated(2, |_| {
    ///     let mut vs = nn::VarStore::new(Device::Cpu);
    ///     let replica = nn::linear(vs.root() / "fc", 4, 2, Default::default());
    ///     vs.copy(&trained)?;
    ///     Ok::<_, tch::TchError>(WithMode::new(replica))
    /// })
    /// .unwrap();
    /// let x = Tensor::ones([1, 4], (Kind::Float, Device::Cpu));
    /// assert!(served.run(|r| r.get().forward(&x)).equal(&tch::no_grad(|| net.forward(&x))));
    /// ```
    pub fn replicated<E: std::fmt::Display>(
        n: usize,
        factory: impl FnMut(usize) -> Result<M, E>,
    ) -> Result<Self, ScopeError> {
        Self::new(Replicas::new(n, factory)?)
    }
}

impl<M: Servable> Drop for Inference<M> {
    /// Ends the hold (the model's modes come back, as with
    /// [`into_inner`](Inference::into_inner)), then drops the model.
    fn drop(&mut self) {
        self.release();
        // SAFETY: dropped once, here; `into_inner` forgets `self` instead.
        unsafe { ManuallyDrop::drop(&mut self.model) }
    }
}
