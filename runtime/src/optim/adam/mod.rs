//! `torch.optim.Adam` and `torch.optim.AdamW`, op for op: the optimizers
//! and their state here, one parameter's update in [`update`].

mod update;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tch::Tensor;
use tch::nn::VarStore;

use super::cow::Cow;
use super::params::{Params, StateIn, StateOut, check, zeros_like};
use super::{Held, Optimizer};
use crate::{NoGrad, Scope, ScopeError};

/// Adam's settings, as PyTorch names them.
#[derive(Debug, Clone, Copy)]
struct Options {
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    weight_decay: f64,
    amsgrad: bool,
}

/// One parameter's state, made at its first step.
struct Slot {
    step: i64,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    max_exp_avg_sq: Option<Tensor>,
    /// The storages of `exp_avg`, `exp_avg_sq`, `max_exp_avg_sq`.
    cows: [Cow; 3],
}

impl Slot {
    fn new(step: i64, exp_avg: Tensor, exp_avg_sq: Tensor, max: Option<Tensor>) -> Self {
        Self {
            step,
            exp_avg,
            exp_avg_sq,
            max_exp_avg_sq: max,
            cows: Default::default(),
        }
    }
}

/// One parameter's update, written and not yet made current.
struct Next {
    param: Option<Tensor>,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    max_exp_avg_sq: Option<Tensor>,
}

struct Inner {
    options: Options,
    /// Under the lock with the buffers: tch's tensors are not `Sync`, and
    /// the optimizer is (a checkpoint shares it with its task).
    params: Params,
    slots: Vec<Option<Slot>>,
    taken: i64,
}

/// The state both share; `decoupled` is AdamW's weight decay.
struct Core {
    name: &'static str,
    decoupled: bool,
    inner: Mutex<Inner>,
}

impl Core {
    fn new(
        vs: &VarStore,
        lr: f64,
        name: &'static str,
        decoupled: bool,
        weight_decay: f64,
    ) -> Result<Self, ScopeError> {
        check(name, "the learning rate", lr, lr >= 0.0, "finite and >= 0")?;
        let params = Params::of(vs, name)?;
        let slots = params.tensors.iter().map(|_| None).collect();
        Ok(Self {
            name,
            decoupled,
            inner: Mutex::new(Inner {
                params,
                options: Options {
                    lr,
                    beta1: 0.9,
                    beta2: 0.999,
                    eps: 1e-8,
                    weight_decay,
                    amsgrad: false,
                },
                slots,
                taken: 0,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding it can only come from outside a step's
        // tensor ops (they are all fallible): the state is whole.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, f: impl FnOnce(&mut Options)) {
        f(&mut self.lock().options);
    }

    fn step(&self) -> Result<(), ScopeError> {
        let _no_grad = NoGrad.enter();
        let mut guard = self.lock();
        let inner = &mut *guard;
        let o = inner.options;
        let decoupled = self.decoupled;
        inner.params.step_each(
            self.name,
            &mut inner.slots,
            |p, cow, grad, slot| {
                let s = match slot {
                    Some(s) => s,
                    None => {
                        let max = if o.amsgrad {
                            Some(zeros_like(p)?)
                        } else {
                            None
                        };
                        slot.insert(Slot::new(0, zeros_like(p)?, zeros_like(p)?, max))
                    }
                };
                let mut next = update::update(decoupled, &o, p, cow, grad, s)?;
                Ok((next.param.take(), next))
            },
            |slot, next| {
                let Some(s) = slot.as_mut() else { return };
                s.step += 1;
                s.exp_avg = next.exp_avg;
                s.exp_avg_sq = next.exp_avg_sq;
                if next.max_exp_avg_sq.is_some() {
                    s.max_exp_avg_sq = next.max_exp_avg_sq;
                }
            },
        )?;
        inner.taken += 1;
        Ok(())
    }

    fn try_zero_grad(&self) -> Result<(), ScopeError> {
        self.lock().params.try_zero_grad(self.name)
    }

    fn state(&self) -> Vec<(String, Tensor)> {
        self.state_reusing(Vec::new())
    }

    fn state_reusing(&self, old: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
        let _no_grad = NoGrad.enter();
        let inner = self.lock();
        let mut out = Self::options_out(self.name, &inner, old);
        for (name, slot) in inner.params.names.iter().zip(&inner.slots) {
            let Some(s) = slot else { continue };
            out.count("step", name, s.step);
            out.buffer("exp_avg", name, &s.exp_avg);
            out.buffer("exp_avg_sq", name, &s.exp_avg_sq);
            if let Some(m) = &s.max_exp_avg_sq {
                out.buffer("max_exp_avg_sq", name, m);
            }
        }
        out.entries
    }

    /// See [`Optimizer::hold`]: the state as `state_reusing` names it,
    /// its buffers aliased.
    fn hold(&self) -> Result<Option<Held>, ScopeError> {
        let _no_grad = NoGrad.enter();
        let mut guard = self.lock();
        let inner = &mut *guard;
        let failed = |e: tch::TchError| {
            ScopeError::run(self.name, None, format!("could not alias the state: {e}"))
        };
        let (hold, params) = inner.params.hold().map_err(failed)?;
        let mut out = Self::options_out(self.name, inner, Vec::new());
        for (name, slot) in inner.params.names.iter().zip(&mut inner.slots) {
            let Some(s) = slot else { continue };
            out.count("step", name, s.step);
            let [ea, es, max] = &mut s.cows;
            out.alias("exp_avg", name, &s.exp_avg, ea, &hold)
                .map_err(failed)?;
            out.alias("exp_avg_sq", name, &s.exp_avg_sq, es, &hold)
                .map_err(failed)?;
            if let Some(m) = &s.max_exp_avg_sq {
                out.alias("max_exp_avg_sq", name, m, max, &hold)
                    .map_err(failed)?;
            }
        }
        Ok(Some(Held {
            params,
            state: out.entries,
            hold,
        }))
    }

    fn load_state(&self, state: &[(String, Tensor)]) -> Result<(), ScopeError> {
        let _no_grad = NoGrad.enter();
        let mut input = StateIn::parse(self.name, state)?;
        let options = Options {
            lr: input.option("lr")?,
            beta1: input.option("beta1")?,
            beta2: input.option("beta2")?,
            eps: input.option("eps")?,
            weight_decay: input.option("weight_decay")?,
            amsgrad: input.option("amsgrad")? != 0.0,
        };
        let taken = input.count("taken", "steps")?.unwrap_or(0);
        let mut inner = self.lock();
        let params = &inner.params;
        let mut slots = Vec::with_capacity(params.names.len());
        for (name, p) in params.names.iter().zip(&params.tensors) {
            let step = input.count("step", name)?;
            let exp_avg = input.buffer("exp_avg", name, p)?;
            let exp_avg_sq = input.buffer("exp_avg_sq", name, p)?;
            let max_exp_avg_sq = input.buffer("max_exp_avg_sq", name, p)?;
            slots.push(match (step, exp_avg, exp_avg_sq) {
                (Some(step), Some(exp_avg), Some(exp_avg_sq)) => {
                    if options.amsgrad && max_exp_avg_sq.is_none() {
                        return Err(ScopeError::load(
                            self.name,
                            Some(p.device()),
                            format!("the amsgrad state lacks `max_exp_avg_sq` of `{name}`"),
                        ));
                    }
                    Some(Slot::new(step, exp_avg, exp_avg_sq, max_exp_avg_sq))
                }
                (None, None, None) => None,
                _ => {
                    return Err(ScopeError::load(
                        self.name,
                        Some(p.device()),
                        format!("the state of `{name}` is incomplete (step, exp_avg and exp_avg_sq go together)"),
                    ));
                }
            });
        }
        input.finish()?;
        inner.options = options;
        inner.slots = slots;
        inner.taken = taken;
        Ok(())
    }

    /// The options and the step count, the state's first entries.
    fn options_out(name: &'static str, inner: &Inner, old: Vec<(String, Tensor)>) -> StateOut {
        let o = inner.options;
        let mut out = StateOut::reusing(name, old);
        out.option("lr", o.lr);
        out.option("beta1", o.beta1);
        out.option("beta2", o.beta2);
        out.option("eps", o.eps);
        out.option("weight_decay", o.weight_decay);
        out.option("amsgrad", f64::from(u8::from(o.amsgrad)));
        out.count("taken", "steps", inner.taken);
        out
    }
}

macro_rules! adam_like {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $decoupled:literal, $default_wd:expr) => {
        $(#[$doc])*
        pub struct $ty(Arc<Core>);

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let inner = self.0.lock();
                f.debug_struct($name)
                    .field("options", &inner.options)
                    .field("params", &inner.params.names)
                    .field("steps_taken", &inner.taken)
                    .finish()
            }
        }

        impl $ty {
            #[doc = concat!("`torch.optim.", $name, "(params, lr)` over the trainable variables of `vs` ")]
            /// (those that require grad when it is made), with PyTorch's
            /// defaults: betas `(0.9, 0.999)`, eps `1e-8`, no amsgrad.
            ///
            /// # Errors
            /// A [`ScopeError`] when `lr` is negative or not finite, or `vs`
            /// has no trainable variable.
            pub fn new(vs: &VarStore, lr: f64) -> Result<Self, ScopeError> {
                Core::new(vs, lr, $name, $decoupled, $default_wd).map(|c| Self(Arc::new(c)))
            }

            /// The betas, each in `[0, 1)`.
            ///
            /// # Panics
            /// When a beta is outside `[0, 1)`, as PyTorch raises.
            #[must_use]
            pub fn betas(self, beta1: f64, beta2: f64) -> Self {
                assert!((0.0..1.0).contains(&beta1), "{}: beta1 must be in [0, 1), got {beta1}", $name);
                assert!((0.0..1.0).contains(&beta2), "{}: beta2 must be in [0, 1), got {beta2}", $name);
                self.0.set(|o| { o.beta1 = beta1; o.beta2 = beta2; });
                self
            }

            /// The term added to the denominator, `>= 0`.
            ///
            /// # Panics
            /// When `eps` is negative or not finite.
            #[must_use]
            pub fn eps(self, eps: f64) -> Self {
                assert!(eps.is_finite() && eps >= 0.0, "{}: eps must be >= 0, got {eps}", $name);
                self.0.set(|o| o.eps = eps);
                self
            }

            /// The weight decay, `>= 0`.
            ///
            /// # Panics
            /// When `wd` is negative or not finite.
            #[must_use]
            pub fn weight_decay(self, wd: f64) -> Self {
                assert!(wd.is_finite() && wd >= 0.0, "{}: weight_decay must be >= 0, got {wd}", $name);
                self.0.set(|o| o.weight_decay = wd);
                self
            }

            /// AMSGrad: the running maximum of the second moment.
            #[must_use]
            pub fn amsgrad(self, on: bool) -> Self {
                self.0.set(|o| o.amsgrad = on);
                self
            }

            /// The learning rate now.
            pub fn lr(&self) -> f64 {
                self.0.lock().options.lr
            }

            /// Sets the learning rate (a scheduler's step); it is part of
            /// the state a checkpoint saves.
            pub fn set_lr(&self, lr: f64) {
                self.0.set(|o| o.lr = lr);
            }

            /// Steps taken since the optimizer was made (or that the loaded
            /// state had taken).
            pub fn steps_taken(&self) -> i64 {
                self.0.lock().taken
            }

            /// See [`Optimizer::step`].
            ///
            /// # Errors
            /// See [`Optimizer::step`].
            pub fn step(&self) -> Result<(), ScopeError> {
                self.0.step()
            }

            /// See [`Optimizer::zero_grad`].
            ///
            /// # Panics
            /// See [`Optimizer::zero_grad`].
            pub fn zero_grad(&self) {
                Optimizer::zero_grad(self);
            }

            /// See [`Optimizer::backward_step`].
            ///
            /// # Errors
            /// See [`Optimizer::backward_step`].
            pub fn backward_step(&self, loss: &Tensor) -> Result<(), ScopeError> {
                Optimizer::backward_step(self, loss)
            }
        }

        impl Optimizer for $ty {
            fn name(&self) -> &'static str {
                $name
            }
            fn step(&self) -> Result<(), ScopeError> {
                self.0.step()
            }
            fn try_zero_grad(&self) -> Result<(), ScopeError> {
                self.0.try_zero_grad()
            }
            fn state(&self) -> Vec<(String, Tensor)> {
                self.0.state()
            }
            fn state_into(&self, into: &mut Vec<(String, Tensor)>) {
                *into = self.0.state_reusing(std::mem::take(into));
            }
            fn load_state(&self, state: &[(String, Tensor)]) -> Result<(), ScopeError> {
                self.0.load_state(state)
            }
            fn hold(&self) -> Result<Option<Held>, ScopeError> {
                self.0.hold()
            }
            fn handle(&self) -> Arc<dyn Optimizer> {
                Arc::new(Self(Arc::clone(&self.0)))
            }
        }
    };
}

adam_like!(
    /// `torch.optim.Adam`: moments and bias correction, L2 weight decay
    /// added to the gradient (see the [module docs](super) for the state
    /// a checkpoint saves).
    Adam,
    "Adam",
    false,
    0.0
);

adam_like!(
    /// `torch.optim.AdamW`: Adam with decoupled weight decay (the
    /// parameter shrunk by `lr * weight_decay` before the update); the
    /// default weight decay is PyTorch's, `0.01`.
    AdamW,
    "AdamW",
    true,
    0.01
);
