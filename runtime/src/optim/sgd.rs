//! `torch.optim.SGD`, with momentum, dampening and Nesterov, op for op.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tch::Tensor;
use tch::nn::VarStore;

use super::cow::{Cow, dst};
use super::params::{Params, StateIn, StateOut, check, scalar};
use super::{Held, Optimizer};
use crate::{NoGrad, Scope, ScopeError};

#[derive(Debug, Clone, Copy)]
struct Options {
    lr: f64,
    momentum: f64,
    dampening: f64,
    weight_decay: f64,
    nesterov: bool,
}

struct Inner {
    options: Options,
    /// Under the lock with the buffers: tch's tensors are not `Sync`, and
    /// the optimizer is (a checkpoint shares it with its task).
    params: Params,
    /// Each parameter's momentum buffer, made at its first step with
    /// momentum.
    buffers: Vec<Option<Tensor>>,
    /// The momentum buffers' storages.
    buffer_cows: Vec<Cow>,
    taken: i64,
}

/// `torch.optim.SGD(params, lr, momentum, dampening, weight_decay,
/// nesterov)`: plain gradient descent by default; momentum buffers are
/// part of the state a checkpoint saves (see the [module docs](super)).
///
/// ```
/// use tch::nn::{self, VarStore};
/// use tch::Device;
/// use tch_scope::optim::Sgd;
///
/// let vs = VarStore::new(Device::Cpu);
/// let _w = vs.root().zeros("w", &[2]);
/// let opt = Sgd::new(&vs, 0.1).unwrap().momentum(0.9).nesterov(true);
/// assert!(Sgd::new(&vs, 0.1).unwrap().dampening(0.5).nesterov(true).check().is_err());
/// # let _ = opt;
/// ```
pub struct Sgd(Arc<Mutex<Inner>>);

impl std::fmt::Debug for Sgd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("Sgd")
            .field("options", &inner.options)
            .field("params", &inner.params.names)
            .field("steps_taken", &inner.taken)
            .finish()
    }
}

impl Sgd {
    /// `torch.optim.SGD(params, lr)` over the trainable variables of `vs`
    /// (those that require grad when it is made): no momentum, no weight
    /// decay.
    ///
    /// # Errors
    /// A [`ScopeError`] when `lr` is negative or not finite, or `vs` has no
    /// trainable variable.
    pub fn new(vs: &VarStore, lr: f64) -> Result<Self, ScopeError> {
        check("Sgd", "the learning rate", lr, lr >= 0.0, "finite and >= 0")?;
        let params = Params::of(vs, "Sgd")?;
        let buffers = params.tensors.iter().map(|_| None).collect();
        let buffer_cows = params.tensors.iter().map(|_| Cow::default()).collect();
        Ok(Self(Arc::new(Mutex::new(Inner {
            params,
            options: Options {
                lr,
                momentum: 0.0,
                dampening: 0.0,
                weight_decay: 0.0,
                nesterov: false,
            },
            buffers,
            buffer_cows,
            taken: 0,
        }))))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(self, f: impl FnOnce(&mut Options)) -> Self {
        f(&mut self.lock().options);
        self
    }

    /// The momentum factor, `>= 0`.
    #[must_use]
    pub fn momentum(self, momentum: f64) -> Self {
        self.set(|o| o.momentum = momentum)
    }

    /// The dampening of the momentum.
    #[must_use]
    pub fn dampening(self, dampening: f64) -> Self {
        self.set(|o| o.dampening = dampening)
    }

    /// The weight decay (L2, added to the gradient), `>= 0`.
    #[must_use]
    pub fn weight_decay(self, wd: f64) -> Self {
        self.set(|o| o.weight_decay = wd)
    }

    /// Nesterov momentum (needs a momentum and no dampening).
    #[must_use]
    pub fn nesterov(self, on: bool) -> Self {
        self.set(|o| o.nesterov = on)
    }

    /// Checks the settings as PyTorch's constructor does; [`step`](Self::step)
    /// checks them too, so a wrong setting never updates a parameter.
    ///
    /// # Errors
    /// A [`ScopeError`] naming the setting: a negative momentum or weight
    /// decay, or Nesterov without momentum or with dampening.
    pub fn check(&self) -> Result<(), ScopeError> {
        let o = self.lock().options;
        check(
            "Sgd",
            "momentum",
            o.momentum,
            o.momentum >= 0.0,
            "finite and >= 0",
        )?;
        check(
            "Sgd",
            "weight_decay",
            o.weight_decay,
            o.weight_decay >= 0.0,
            "finite and >= 0",
        )?;
        check("Sgd", "dampening", o.dampening, true, "finite")?;
        if o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0) {
            return Err(ScopeError::new(
                "Sgd",
                None,
                "Nesterov momentum requires a momentum and zero dampening",
            ));
        }
        Ok(())
    }

    /// The learning rate now.
    pub fn lr(&self) -> f64 {
        self.lock().options.lr
    }

    /// Sets the learning rate (a scheduler's step); it is part of the state
    /// a checkpoint saves.
    pub fn set_lr(&self, lr: f64) {
        self.lock().options.lr = lr;
    }

    /// Steps taken since the optimizer was made (or that the loaded state
    /// had taken).
    pub fn steps_taken(&self) -> i64 {
        self.lock().taken
    }

    /// See [`Optimizer::step`].
    ///
    /// # Errors
    /// See [`Optimizer::step`]; also a wrong setting ([`check`](Self::check)).
    pub fn step(&self) -> Result<(), ScopeError> {
        self.check()?;
        let _no_grad = NoGrad.enter();
        let mut guard = self.lock();
        let inner = &mut *guard;
        let o = inner.options;
        let mut momenta: Vec<_> = inner
            .buffers
            .iter_mut()
            .zip(inner.buffer_cows.iter_mut())
            .collect();
        inner.params.step_each(
            "Sgd",
            &mut momenta,
            |p, cow, grad, (buf, buf_cow)| update(&o, p, cow, grad, buf.as_ref(), buf_cow),
            |(buf, _), next| {
                if next.is_some() {
                    **buf = next;
                }
            },
        )?;
        inner.taken += 1;
        Ok(())
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

/// PyTorch's `_single_tensor_sgd` for one parameter (not maximize). A
/// tensor a boundary holds is written out of place (see `adam::update`):
/// the parameter's output (`None`: written in place) and the momentum
/// buffer's new value, for the caller to make current.
fn update(
    o: &Options,
    p: &Tensor,
    p_cow: &mut Cow,
    grad: &Tensor,
    buf: Option<&Tensor>,
    buf_cow: &mut Cow,
) -> Result<(Option<Tensor>, Option<Tensor>), tch::TchError> {
    let p_out = p_cow.target(p)?;
    let mut grad = grad.shallow_clone();
    if o.weight_decay != 0.0 {
        // grad.add(param, alpha=weight_decay)
        grad = grad.f_add(&p.f_mul(&scalar(o.weight_decay)?)?)?;
    }
    let mut next = None;
    if o.momentum != 0.0 {
        let b = match buf {
            None => grad.f_detach_copy()?,
            Some(b) => {
                // buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                let b_out = buf_cow.target(b)?;
                let mut out = dst(&b_out, b).shallow_clone();
                let _ = b.f_mul_out(&out, &scalar(o.momentum)?)?;
                let _ = out.f_add_(&grad.f_mul(&scalar(1.0 - o.dampening)?)?)?;
                out
            }
        };
        grad = if o.nesterov {
            grad.f_add(&b.f_mul(&scalar(o.momentum)?)?)?
        } else {
            b.shallow_clone()
        };
        next = Some(b);
    }
    // param.add_(grad, alpha=-lr)
    let _ = p.f_add_out(dst(&p_out, p), &grad.f_mul(&scalar(-o.lr)?)?)?;
    Ok((p_out, next))
}

impl Optimizer for Sgd {
    fn name(&self) -> &'static str {
        "Sgd"
    }

    fn step(&self) -> Result<(), ScopeError> {
        Sgd::step(self)
    }

    fn try_zero_grad(&self) -> Result<(), ScopeError> {
        self.lock().params.try_zero_grad("Sgd")
    }

    fn state(&self) -> Vec<(String, Tensor)> {
        self.state_reusing(Vec::new())
    }

    fn state_into(&self, into: &mut Vec<(String, Tensor)>) {
        *into = self.state_reusing(std::mem::take(into));
    }

    fn hold(&self) -> Result<Option<Held>, ScopeError> {
        let _no_grad = NoGrad.enter();
        let mut guard = self.lock();
        let inner = &mut *guard;
        let failed = |e: tch::TchError| {
            ScopeError::run("Sgd", None, format!("could not alias the state: {e}"))
        };
        let (hold, params) = inner.params.hold().map_err(failed)?;
        let mut out = Self::options_out(inner, Vec::new());
        for ((name, b), cow) in inner
            .params
            .names
            .iter()
            .zip(&inner.buffers)
            .zip(&mut inner.buffer_cows)
        {
            if let Some(b) = b {
                out.alias("momentum_buffer", name, b, cow, &hold)
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
        let mut input = StateIn::parse("Sgd", state)?;
        let options = Options {
            lr: input.option("lr")?,
            momentum: input.option("momentum")?,
            dampening: input.option("dampening")?,
            weight_decay: input.option("weight_decay")?,
            nesterov: input.option("nesterov")? != 0.0,
        };
        let taken = input.count("taken", "steps")?.unwrap_or(0);
        let mut inner = self.lock();
        let params = &inner.params;
        let buffers = params
            .names
            .iter()
            .zip(&params.tensors)
            .map(|(name, p)| input.buffer("momentum_buffer", name, p))
            .collect::<Result<Vec<_>, _>>()?;
        input.finish()?;
        inner.options = options;
        inner.buffers = buffers;
        inner.taken = taken;
        Ok(())
    }

    fn handle(&self) -> Arc<dyn Optimizer> {
        Arc::new(Sgd(Arc::clone(&self.0)))
    }
}

impl Sgd {
    /// The state, built into `old`'s tensors where they line up.
    fn state_reusing(&self, old: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
        let _no_grad = NoGrad.enter();
        let inner = self.lock();
        let mut out = Self::options_out(&inner, old);
        for (name, b) in inner.params.names.iter().zip(&inner.buffers) {
            if let Some(b) = b {
                out.buffer("momentum_buffer", name, b);
            }
        }
        out.entries
    }

    /// The options and the step count, the state's first entries.
    fn options_out(inner: &Inner, old: Vec<(String, Tensor)>) -> StateOut {
        let o = inner.options;
        let mut out = StateOut::reusing("Sgd", old);
        out.option("lr", o.lr);
        out.option("momentum", o.momentum);
        out.option("dampening", o.dampening);
        out.option("weight_decay", o.weight_decay);
        out.option("nesterov", f64::from(u8::from(o.nesterov)));
        out.count("taken", "steps", inner.taken);
        out
    }
}
