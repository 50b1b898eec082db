//! Optimizers whose whole state a checkpoint can hold: [`Adam`], [`AdamW`]
//! and [`Sgd`] (with momentum and Nesterov).
//!
//! tch's `nn::Optimizer` keeps its state inside a C++ object that Rust
//! cannot read or write, so a run resumed from a checkpoint restarts Adam's
//! moments and SGD's momentum from zero (the loss spike users see after a
//! resume). These optimizers keep their state in tensors tch-scope can
//! reach ([`Optimizer::state`], [`Optimizer::load_state`]), and apply
//! PyTorch's updates — `torch.optim.Adam`, `AdamW` and `SGD` with their
//! default single-tensor (`foreach=False`) implementation, op for op — so
//! a Rust run and a PyTorch run from the same weights and gradients take
//! the same steps.
//!
//! Every method takes `&self` (the state sits behind a mutex), so an
//! optimizer bound without `mut` can be named by a checkpoint scope and
//! still stepped inside its body:
//!
//! ```
//! use tch::nn::{self, Module, VarStore};
//! use tch::{Device, Kind, Tensor};
//! use tch_scope::optim::Adam;
//!
//! let vs = VarStore::new(Device::Cpu);
//! let lin = nn::linear(vs.root() / "lin", 3, 1, Default::default());
//! let opt = Adam::new(&vs, 1e-2).unwrap().weight_decay(1e-4);
//! let x = Tensor::ones([4, 3], (Kind::Float, Device::Cpu));
//! for _ in 0..3 {
//!     let loss = lin.forward(&x).square().mean(Kind::Float);
//!     opt.backward_step(&loss).unwrap();
//! }
//! assert_eq!(opt.steps_taken(), 3);
//! ```
//!
//! Inside a checkpoint's [`steps`](crate::steps) loop that names the
//! optimizer, each step boundary aliases its parameters and state instead
//! of copying them: the next update of an aliased
//! tensor is written into another buffer with the `out=` form of the same
//! operator — bitwise what the in-place operator gives — and swapped in
//! (`set_data` for a parameter, which keeps its identity: the model and
//! the `VarStore` see the new values). See [`steps`](crate::steps) for
//! what that means for views of a parameter and for code that writes one
//! in place.
//!
//! What differs from PyTorch: [`zero_grad`](Optimizer::zero_grad) zeroes
//! each gradient in place (PyTorch's `zero_grad(set_to_none=False)`);
//! tch offers no way to unset a gradient. A parameter whose gradient is
//! zero still takes a step (weight decay and the moments act on it) where
//! PyTorch's default would skip a parameter whose gradient is `None`. A
//! parameter that never had a gradient is skipped, as in PyTorch. The
//! parameters are the `VarStore`'s trainable variables when the optimizer
//! is made, in the order of their names.

mod adam;
mod cow;
mod params;
mod sgd;

pub use adam::{Adam, AdamW};
pub use sgd::Sgd;

use std::sync::Arc;

use tch::Tensor;

use crate::ScopeError;

pub(crate) use cow::{Cow, Hold};

/// What a checkpoint's step boundary holds of an optimizer instead of a
/// copy (see [`Optimizer::hold`]): aliases of its parameters and of its
/// state, and the hold that keeps the next updates off their storages.
/// Opaque: only this crate's optimizers make one.
#[doc(hidden)]
pub struct Held {
    /// The parameters by their names in the `VarStore`.
    pub(crate) params: HeldParams,
    /// The state as [`Optimizer::state`] names it, its buffers aliased.
    pub(crate) state: Vec<(String, Tensor)>,
    /// Last: dropped after the aliases.
    pub(crate) hold: Arc<Hold>,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("params", &self.params.len())
            .field("state", &self.state.len())
            .finish_non_exhaustive()
    }
}

/// The parameters a boundary holds, by their names in the `VarStore`.
pub(crate) type HeldParams = Vec<(String, HeldParam)>;

/// One parameter as a boundary holds it.
pub(crate) enum HeldParam {
    /// An alias of parameter `index` (a view sharing its version counter).
    Alias { index: usize, alias: Tensor },
    /// Not aliased, for the checkpoint to copy: code outside the optimizer
    /// wrote it in place while an earlier boundary aliased it.
    Copy,
}

/// What a checkpoint needs of an optimizer: a step, and its state as named
/// tensors to save and to load back bitwise.
pub trait Optimizer: Send + Sync {
    /// The optimizer's name as errors and checkpoints give it (`"Adam"`).
    fn name(&self) -> &'static str;

    /// Applies one update to every parameter that has a gradient.
    ///
    /// # Errors
    /// A [`ScopeError`] naming the optimizer and the parameter when an
    /// operator of the update fails (a passed `deadline` refuses it, or
    /// the gradient does not match the parameter). Parameters updated
    /// before the failure stay updated; the step count does not advance.
    fn step(&self) -> Result<(), ScopeError>;

    /// Zeroes every parameter's gradient.
    ///
    /// # Errors
    /// A [`ScopeError`] naming the parameter when an operator is refused
    /// (a passed `deadline`).
    fn try_zero_grad(&self) -> Result<(), ScopeError>;

    /// [`try_zero_grad`](Self::try_zero_grad) as tch's methods are: a
    /// refused operator panics.
    ///
    /// # Panics
    /// When an operator is refused (a passed `deadline`).
    fn zero_grad(&self) {
        if let Err(e) = self.try_zero_grad() {
            panic!("{e}");
        }
    }

    /// [`zero_grad`](Self::zero_grad), `loss.backward()`, then
    /// [`step`](Self::step), as tch's `Optimizer::backward_step`.
    ///
    /// # Errors
    /// The backward pass's error, or the step's.
    fn backward_step(&self, loss: &Tensor) -> Result<(), ScopeError> {
        self.try_zero_grad()?;
        loss.f_backward().map_err(|e| {
            ScopeError::run(
                self.name(),
                Some(loss.device()),
                format!("backward failed: {e}"),
            )
        })?;
        self.step()
    }

    /// The state, as named tensors (copies, safe to keep while training
    /// goes on): the options, the number of steps taken, and each
    /// parameter's buffers, keyed by the parameter's name in the
    /// `VarStore`.
    fn state(&self) -> Vec<(String, Tensor)>;

    /// [`state`](Self::state) written into `into`, reusing its tensors: an
    /// entry whose name, shape and dtype match the one made at its place is
    /// overwritten in place, others are made anew, so `into` ends equal to
    /// what `state` gives. What a checkpoint calls at every step boundary,
    /// where fresh copies would cost an allocation (and its page faults)
    /// per buffer and step. The default calls `state`.
    fn state_into(&self, into: &mut Vec<(String, Tensor)>) {
        *into = self.state();
    }

    /// The parameters and the state aliased for a checkpoint's step
    /// boundary, copy-on-write: until the [`Held`] is dropped, an update
    /// writes each aliased tensor into another buffer and swaps it in
    /// (a parameter keeps its identity, `set_data`), so the boundary's
    /// values stay as they were without a copy. `Ok(None)` (the default):
    /// the optimizer can't, and the checkpoint copies its weights and
    /// [`state`](Self::state) at every boundary instead.
    ///
    /// # Errors
    /// An operator that fails (the checkpoint then saves the live state at
    /// its exit, as for any boundary it could not take).
    #[doc(hidden)]
    fn hold(&self) -> Result<Option<Held>, ScopeError> {
        Ok(None)
    }

    /// Loads a state that [`state`](Self::state) gave, bitwise.
    ///
    /// # Errors
    /// A [`ScopeError`] when an entry names no parameter of this optimizer,
    /// when a buffer's shape or dtype differs from its parameter's, or when
    /// the state is another optimizer's. Nothing is loaded then.
    fn load_state(&self, state: &[(String, Tensor)]) -> Result<(), ScopeError>;

    /// A second handle to this optimizer, sharing its parameters and
    /// state: what a checkpoint that names it keeps, so that nothing it
    /// holds can outlive the optimizer.
    fn handle(&self) -> Arc<dyn Optimizer>;
}
