//! [`Inference`]: a model put in eval mode once, shared by many threads.

use crate::{InferenceMode, Scope, ScopeError, Trainable};

/// A model in eval mode for serving: every submodule is put in eval mode
/// once, by [`new`](Inference::new), and [`run`](Inference::run) calls the
/// model under `inference_mode` without writing any flag, so many threads
/// can share it in an `Arc` (it is `Send + Sync` for [`tch::CModule`], and
/// for [`WithMode`](crate::WithMode) of a `Send + Sync` module).
///
/// This is the answer to a scope on a model that other threads run outside
/// any scope (a race on the model's flags, see [`Mode`](crate::Mode)): the
/// model's mode never changes while it is shared. Don't enter `eval` or
/// `train` scopes on the model inside `run`: the other threads would see
/// their modes.
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
pub struct Inference<M: Trainable> {
    model: M,
    saved: Option<M::Modes>,
}

impl<M: Trainable> Inference<M> {
    /// Puts every submodule of `model` in eval mode, once.
    ///
    /// # Errors
    /// A [`ScopeError`] if the modes can't be read or set; the model is
    /// then left as it was (and dropped).
    pub fn new(model: M) -> Result<Self, ScopeError> {
        let saved = model
            .switch_training(false)
            .map_err(|e| ScopeError::new("Inference::new", None, e.to_string()))?;
        Ok(Self {
            model,
            saved: Some(saved),
        })
    }

    /// Runs `f` on the model under `inference_mode` (on this thread only:
    /// no shared state is written).
    ///
    /// ```
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
    /// ```
    /// use tch_scope::{Inference, WithMode};
    /// let served = Inference::new(WithMode::new(tch::nn::func(|x| x.relu()))).unwrap();
    /// assert!(!served.get_ref().is_training());
    /// ```
    pub fn get_ref(&self) -> &M {
        &self.model
    }

    /// The model back, in the modes it had before [`new`](Inference::new).
    /// A failure to put them back goes to the exit hook
    /// ([`set_exit_hook`](crate::set_exit_hook)), and the model comes back
    /// in eval mode.
    ///
    /// ```
    /// use tch_scope::{Inference, Trainable, WithMode};
    /// let m = WithMode::new(tch::nn::func(|x| x.relu()));
    /// m.set_training(false).unwrap();
    /// let m = Inference::new(m).unwrap().into_inner();
    /// assert!(!m.is_training());
    /// ```
    pub fn into_inner(mut self) -> M {
        if let Some(saved) = self.saved.take()
            && let Err(e) = self.model.restore_modes(saved)
        {
            crate::exit::report(
                "Inference",
                format_args!("could not restore the model's train/eval modes: {e}"),
            );
        }
        self.model
    }
}
