//! [`recompute`]: activation recomputation, `torch.utils.checkpoint` (the
//! reentrant form, random state kept), as a [`Function`].

use std::ffi::c_void;
use std::sync::{Arc, Mutex, PoisonError};

use tch::{Device, Kind, TchError, Tensor};

use super::{Ctx, Function};
use crate::{Context, Scope, ffi};

unsafe extern "C" {
    fn tch_scope_rng_save(devices: *const i32, n: i32, state: *mut *mut c_void) -> ffi::Status;
    fn tch_scope_rng_restore(state: *const c_void) -> ffi::Status;
    fn tch_scope_rng_free(state: *mut c_void);
}

/// The CPU generator's state and that of the listed CUDA devices.
struct Generators(*mut c_void, Vec<i32>);

// SAFETY: the shim's heap copy of generator states, only read after it is
// made (restoring locks each generator); freed once, from any thread.
unsafe impl Send for Generators {}
// SAFETY: as above.
unsafe impl Sync for Generators {}

impl Generators {
    fn save(devices: Vec<i32>) -> Result<Generators, String> {
        let mut state = std::ptr::null_mut();
        let n = i32::try_from(devices.len()).unwrap_or(i32::MAX);
        // SAFETY: `n` device indices; a writable out-param.
        ffi::check(unsafe { tch_scope_rng_save(devices.as_ptr(), n, &mut state) })?;
        Ok(Generators(state, devices))
    }

    fn restore(&self) -> Result<(), String> {
        // SAFETY: a live saved state, only read.
        ffi::check(unsafe { tch_scope_rng_restore(self.0) })
    }
}

impl Drop for Generators {
    fn drop(&mut self) {
        // SAFETY: made by tch_scope_rng_save, freed once.
        unsafe { tch_scope_rng_free(self.0) }
    }
}

/// Puts the generators back as they were before the recomputation, on
/// every exit (a panicking body included).
struct Forked(Generators);

impl Drop for Forked {
    fn drop(&mut self) {
        if let Err(e) = self.0.restore() {
            crate::exit::report("recompute", e);
        }
    }
}

/// The recomputed function: the body and how many of the inputs are the
/// caller's (a dummy input that requires grad may follow them).
struct Recompute<F> {
    /// Behind a lock only for `Sync` (a closure holding tensors is `Send`
    /// alone): forward and backward each call it once.
    body: Mutex<F>,
    n: usize,
}

impl<F: Fn(&[&Tensor]) -> Vec<Tensor>> Recompute<F> {
    fn new(body: F, n: usize) -> Self {
        Self {
            body: Mutex::new(body),
            n,
        }
    }

    fn call(&self, inputs: &[&Tensor]) -> Vec<Tensor> {
        let body = self.body.lock().unwrap_or_else(PoisonError::into_inner);
        (*body)(inputs)
    }
}

impl<F> Function for Recompute<F>
where
    F: Fn(&[&Tensor]) -> Vec<Tensor> + Send + 'static,
{
    fn forward(&self, ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        let inputs = &inputs[..self.n];
        let mut devices: Vec<i32> = inputs
            .iter()
            .filter(|t| t.defined())
            .filter_map(|t| match t.device() {
                Device::Cuda(i) => i32::try_from(i).ok(),
                _ => None,
            })
            .collect();
        devices.sort_unstable();
        devices.dedup();
        let generators = Generators::save(devices)
            .unwrap_or_else(|e| panic!("recompute: cannot save the random generators: {e}"));
        ctx.save(generators);
        ctx.save(Context::capture());
        ctx.save_for_backward(inputs);
        self.call(inputs)
    }

    fn backward(&self, ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        let saved = ctx.saved_tensors();
        let detached: Vec<Tensor> = saved
            .iter()
            .map(|t| {
                if t.defined() {
                    t.detach().set_requires_grad(t.requires_grad())
                } else {
                    Tensor::new()
                }
            })
            .collect();
        let generators = ctx
            .get::<Generators>()
            .expect("recompute saved its generators");
        let scopes = ctx.get::<Context>().expect("recompute saved its scopes");
        let outputs = {
            let _fork =
                Forked(Generators::save(generators.1.clone()).unwrap_or_else(|e| {
                    panic!("recompute: cannot save the random generators: {e}")
                }));
            generators
                .restore()
                .unwrap_or_else(|e| panic!("recompute: cannot restore the random generators: {e}"));
            let mut scopes: &Context = scopes;
            let _scopes = scopes
                .enter()
                .unwrap_or_else(|e| panic!("recompute: cannot re-enter the forward's scopes: {e}"));
            let Ok(_grad) = crate::EnableGrad.enter();
            let refs: Vec<&Tensor> = detached.iter().collect();
            self.call(&refs)
        };
        let (mut with_grad, mut their_grads) = (Vec::new(), Vec::new());
        for (o, g) in outputs.iter().zip(grads) {
            if o.defined() && o.requires_grad() && g.defined() {
                with_grad.push(o);
                their_grads.push(g);
            }
        }
        if !with_grad.is_empty() {
            super::ffi::backward(&with_grad, &their_grads)
                .unwrap_or_else(|e| panic!("recompute: backward through the recomputed body: {e}"));
        }
        let mut out: Vec<Option<Tensor>> = detached
            .iter()
            .map(|d| {
                if d.defined() && d.requires_grad() {
                    let g = d.grad();
                    g.defined().then_some(g)
                } else {
                    None
                }
            })
            .collect();
        // The dummy input's, if any.
        out.resize_with(ctx.inputs.len(), || None);
        out
    }
}

/// Activation recomputation, `torch.utils.checkpoint(f, *inputs)` with
/// the random state kept (`preserve_rng_state`): `f` runs under `no_grad`
/// and only `inputs` are kept; `backward` restores the CPU generator (and
/// the CUDA generators of the inputs' devices) and the forward's per-thread
/// scopes (autocast, … through [`Context`]) as they were, runs `f` again
/// with grad on and backpropagates through it. Gradients are bitwise
/// those of calling `f` directly, dropout included; parameters `f` reaches
/// (captured tensors, an `Arc`'d module) get theirs. The generators are
/// put back after the recomputation.
///
/// `f` is kept until the backward, so it owns what it captures (`'static`,
/// `Send`):
/// move in shallow clones ([`Capture`]) or `Arc`s of modules. With grad
/// mode off, or in inference mode, it is a plain call that saves nothing;
/// so a recompute nested in `f` runs plainly in the forward and as a
/// recompute of its own in the recomputation.
///
/// The outputs require grad whenever grad mode is on (when no input
/// requires grad, parameters inside `f` may still need theirs). Backward
/// through it is first order only (as the reentrant checkpoint).
///
/// ```
/// use tch::{Device, Kind, Tensor, nn::Module};
/// use tch_scope::autograd::{Capture, recompute};
///
/// let vs = tch::nn::VarStore::new(Device::Cpu);
/// let lin = tch::nn::linear(vs.root(), 4, 4, Default::default());
/// let x = Tensor::randn([2, 4], (Kind::Float, Device::Cpu));
/// let l = lin.capture(); // shares the parameters
/// let y = recompute(&[&x], move |i| vec![l.forward(i[0]).tanh()]).remove(0);
/// y.sum(Kind::Float).backward();
/// assert!(lin.ws.grad().defined());
/// ```
///
/// # Panics
/// With `f`'s own panic, or when libtorch refuses (see [`f_recompute`]).
pub fn recompute<F>(inputs: &[&Tensor], f: F) -> Vec<Tensor>
where
    F: Fn(&[&Tensor]) -> Vec<Tensor> + Send + 'static,
{
    if !crate::is_grad_enabled() || crate::is_inference_mode_enabled() {
        return f(inputs);
    }
    let dummy = needs_dummy(inputs);
    let all = with_dummy(inputs, dummy.as_ref());
    Recompute::new(f, inputs.len()).apply(&all)
}

/// [`recompute`], returning libtorch's error or a panic of `f` as an `Err`.
///
/// # Errors
/// [`TchError::Torch`] with the message.
pub fn f_recompute<F>(inputs: &[&Tensor], f: F) -> Result<Vec<Tensor>, TchError>
where
    F: Fn(&[&Tensor]) -> Vec<Tensor> + Send + 'static,
{
    if !crate::is_grad_enabled() || crate::is_inference_mode_enabled() {
        return std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(inputs)))
            .map_err(|p| TchError::Torch(super::panic_message(&*p)));
    }
    let dummy = needs_dummy(inputs);
    let all = with_dummy(inputs, dummy.as_ref());
    Recompute::new(f, inputs.len()).f_apply(&all)
}

/// An empty leaf that requires grad, when no input does: the recomputation
/// must run for the parameters inside.
fn needs_dummy(inputs: &[&Tensor]) -> Option<Tensor> {
    let any = inputs.iter().any(|t| t.defined() && t.requires_grad());
    (!any).then(|| Tensor::empty([0], (Kind::Float, Device::Cpu)).set_requires_grad(true))
}

fn with_dummy<'a>(inputs: &[&'a Tensor], dummy: Option<&'a Tensor>) -> Vec<&'a Tensor> {
    let mut all = inputs.to_vec();
    all.extend(dummy);
    all
}

/// An owned copy of a value a recomputed function captures, sharing its
/// tensors (`shallow_clone`): what `#[recompute]` keeps of its non-tensor
/// parameters until the backward, and what a closure given to
/// [`recompute`] can move in. Implemented for tensors, `nn::Linear`,
/// `Arc<T>`, plain values (numbers, `bool`, `Kind`, `Device`, `String`,
/// `&'static str`), and `Option`s, `Vec`s and pairs of them; implement it
/// for your own module (share its tensors) or pass an `Arc` of it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be captured by a recomputed function",
    note = "implement `tch_scope::autograd::Capture` for it (sharing its tensors with `shallow_clone`), or pass an `Arc` of it"
)]
pub trait Capture: Send + 'static {
    /// A copy sharing the tensors.
    fn capture(&self) -> Self
    where
        Self: Sized;
}

impl Capture for Tensor {
    fn capture(&self) -> Self {
        self.shallow_clone()
    }
}

impl Capture for tch::nn::Linear {
    fn capture(&self) -> Self {
        tch::nn::Linear {
            ws: self.ws.shallow_clone(),
            bs: self.bs.as_ref().map(Tensor::shallow_clone),
        }
    }
}

impl<T: ?Sized + Send + Sync + 'static> Capture for Arc<T> {
    fn capture(&self) -> Self {
        Arc::clone(self)
    }
}

impl<T: Capture> Capture for Option<T> {
    fn capture(&self) -> Self {
        self.as_ref().map(T::capture)
    }
}

impl<T: Capture> Capture for Vec<T> {
    fn capture(&self) -> Self {
        self.iter().map(T::capture).collect()
    }
}

impl<A: Capture, B: Capture> Capture for (A, B) {
    fn capture(&self) -> Self {
        (self.0.capture(), self.1.capture())
    }
}

macro_rules! capture_by_clone {
    ($($t:ty),*) => {$(
        impl Capture for $t {
            fn capture(&self) -> Self {
                self.clone()
            }
        }
    )*};
}

capture_by_clone!(
    bool,
    char,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    f32,
    f64,
    String,
    &'static str,
    Kind,
    Device
);
