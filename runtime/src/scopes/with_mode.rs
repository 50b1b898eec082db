//! [`WithMode`]: a stored train/eval mode for any `tch::nn::ModuleT`.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};

use tch::nn::{Module, ModuleT};
use tch::{TchError, Tensor};

use crate::Trainable;
use crate::scopes::train::refuse_served;

/// A `tch::nn` module with a train/eval mode, like a PyTorch `nn.Module`.
///
/// `tch::nn` modules take `train: bool` on every `forward_t` call; this
/// wrapper stores the flag instead and passes it on, so `eval(model)` and
/// `train(model)` scopes can switch it. It starts in training mode, as a
/// fresh PyTorch module does. It derefs to the wrapped module.
///
/// As a [`Module`], its `forward` uses the stored mode. (tch's blanket
/// `ModuleT` impl for every `Module` then gives it a `forward_t` that
/// ignores its `train` argument: call `forward`.)
///
/// ```
/// use tch::{Device, Kind, Tensor, nn};
/// use tch_scope::{WithMode, scoped};
///
/// let model = WithMode::new(nn::func_t(|x, train| x.dropout(0.5, train)));
/// let x = Tensor::ones([1000], (Kind::Float, Device::Cpu));
///
/// let y = model.forward(&x); // training: dropout zeroes about half
/// assert!(y.eq(0.0).any().int64_value(&[]) == 1);
///
/// let y = scoped!(eval(model) => model.forward(&x)); // eval: identity
/// assert!(y.equal(&x));
/// assert!(model.is_training());
/// ```
#[derive(Debug)]
pub struct WithMode<M> {
    module: M,
    training: AtomicBool,
}

impl<M> WithMode<M> {
    /// Wraps `module`, in training mode.
    ///
    /// ```no_run
    /// let m = tch_scope::WithMode::new(tch::nn::func(|x| x.relu()));
    /// assert!(m.is_training());
    /// ```
    pub fn new(module: M) -> Self {
        Self {
            module,
            training: AtomicBool::new(true),
        }
    }

    /// Whether the wrapper is in training mode (PyTorch's `model.training`).
    ///
    /// ```no_run
    /// use tch_scope::{Trainable, WithMode};
    /// let m = WithMode::new(tch::nn::func(|x| x.relu()));
    /// m.set_training(false).unwrap();
    /// assert!(!m.is_training());
    /// ```
    pub fn is_training(&self) -> bool {
        self.training.load(Ordering::Relaxed)
    }

    /// The wrapped module.
    ///
    /// ```no_run
    /// let m = tch_scope::WithMode::new(5);
    /// assert_eq!(m.into_inner(), 5);
    /// ```
    pub fn into_inner(self) -> M {
        self.module
    }
}

impl<M: ModuleT> WithMode<M> {
    /// `forward_t` of the wrapped module with the stored mode.
    ///
    /// ```no_run
    /// use tch::{Device, Kind, Tensor};
    /// let m = tch_scope::WithMode::new(tch::nn::func_t(|x, train| x.dropout(0.5, train)));
    /// let x = Tensor::ones([4], (Kind::Float, Device::Cpu));
    /// let _y = m.forward(&x);
    /// ```
    pub fn forward(&self, xs: &Tensor) -> Tensor {
        self.module.forward_t(xs, self.is_training())
    }
}

impl<M: ModuleT> Module for WithMode<M> {
    fn forward(&self, xs: &Tensor) -> Tensor {
        WithMode::forward(self, xs)
    }
}

impl<M> Deref for WithMode<M> {
    type Target = M;

    fn deref(&self) -> &M {
        &self.module
    }
}

/// One flag, saved and put back as is.
///
/// ```no_run
/// use tch_scope::{Trainable, WithMode};
/// let m = WithMode::new(tch::nn::func(|x| x.relu()));
/// let saved = m.modes().unwrap();
/// m.set_training(false).unwrap();
/// m.restore_modes(saved).unwrap();
/// assert!(m.is_training());
/// ```
impl<M> Trainable for WithMode<M> {
    type Modes = bool;

    fn modes(&self) -> Result<bool, TchError> {
        Ok(self.is_training())
    }

    /// # Errors
    /// Refused while an [`Inference`](crate::Inference) serves the model.
    fn set_training(&self, on: bool) -> Result<(), TchError> {
        refuse_served(self.model_id(), "set_training")?;
        self.training.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// # Errors
    /// Refused while an [`Inference`](crate::Inference) serves the model.
    fn restore_modes(&self, modes: bool) -> Result<(), TchError> {
        self.set_training(modes)
    }
}

#[cfg(test)]
mod tests {
    use super::WithMode;
    use crate::Trainable;

    #[test]
    fn a_new_wrapper_trains_and_its_flag_is_saved_and_put_back() {
        let m = WithMode::new(tch::nn::func(|x| x.relu()));
        assert!(m.is_training());
        let saved = m.modes().unwrap();
        m.set_training(false).unwrap();
        assert!(!m.is_training());
        m.restore_modes(saved).unwrap();
        assert!(m.is_training());
        assert_eq!(WithMode::new(5).into_inner(), 5);
    }
}
