//! [`recompute`]: activation recomputation, `torch.utils.checkpoint` (random
//! state kept), as a [`Function`] whose inputs are the body's inputs and
//! the tensors with gradients it reaches (captured parameters), so that
//! the engine routes every gradient: a backward asked for some tensors only
//! computes theirs and touches no other `.grad`.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Mutex, PoisonError};

use tch::{Device, TchError, Tensor};

use super::{Ctx, Function};
use crate::{Context, Scope, ffi};

unsafe extern "C" {
    fn tch_scope_rng_save(devices: *const i32, n: i32, state: *mut *mut c_void) -> ffi::Status;
    fn tch_scope_rng_restore(state: *const c_void) -> ffi::Status;
    fn tch_scope_rng_free(state: *mut c_void);
    fn tch_scope_autograd_sequence_peek() -> u64;
    fn tch_scope_recompute_frontier(
        outputs: *const *mut c_void,
        n_outputs: usize,
        inputs: *const *mut c_void,
        n_inputs: usize,
        first: u64,
        end: u64,
        list: *mut *mut c_void,
        n: *mut usize,
    ) -> ffi::Status;
    fn tch_scope_tensor_list_take(list: *mut c_void, out: *mut *mut c_void);
    fn tch_scope_recompute_cut(
        inputs: *const *mut c_void,
        n: usize,
        create_graph: bool,
        out: *mut *mut c_void,
        cut: *mut *mut c_void,
    ) -> ffi::Status;
    fn tch_scope_recompute_open(cut: *mut c_void);
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

/// The recomputed function. Its inputs: the caller's `n` inputs, then the
/// frontier (the tensors outside the body whose gradients it computes).
struct Recompute<F> {
    /// Behind a lock only for `Sync` (a closure holding tensors is `Send`
    /// alone): the backward calls it once.
    body: Mutex<F>,
    n: usize,
    /// What the first run left for `forward` to keep: its outputs and the
    /// generators as they were before it.
    first: Mutex<Option<(Vec<Tensor>, Generators)>>,
}

impl<F: Fn(&[&Tensor]) -> Vec<Tensor>> Recompute<F> {
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
        let (outputs, generators) = self
            .first
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .expect("recompute's forward runs once");
        ctx.save(generators);
        ctx.save(Context::capture());
        // The frontier too: backward asks for its gradients, and libtorch
        // refuses a backward after a captured tensor was changed in place.
        ctx.save_for_backward(inputs);
        outputs
    }

    fn backward(&self, ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        let n_all = ctx.inputs.len();
        let needed: Vec<bool> = (0..n_all).map(|i| ctx.needs_input_grad(i)).collect();
        if !needed.contains(&true) {
            return (0..n_all).map(|_| None).collect();
        }
        let saved = ctx.saved_tensors();
        let (inputs, frontier) = saved.split_at(self.n);
        // The engine's grad mode: on for a backward with `create_graph`.
        let create_graph = crate::is_grad_enabled();
        let cut = Cut::new(inputs, create_graph)
            .unwrap_or_else(|e| panic!("recompute: cannot cut the recomputed inputs: {e}"));
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
            let refs: Vec<&Tensor> = cut.inputs.iter().collect();
            self.call(&refs)
        };
        let (mut roots, mut their_grads) = (Vec::new(), Vec::new());
        for (o, g) in outputs.iter().zip(grads) {
            if o.defined() && o.requires_grad() && g.defined() {
                roots.push(o);
                their_grads.push(g);
            }
        }
        // Only what this backward asks for, as `torch.autograd.grad`
        // (accumulating nothing): the engine routes the results.
        let asked: Vec<usize> = (0..n_all)
            .filter(|&i| {
                let t = if i < self.n {
                    &cut.inputs[i]
                } else {
                    &frontier[i - self.n]
                };
                needed[i] && t.defined() && t.requires_grad()
            })
            .collect();
        let mut out: Vec<Option<Tensor>> = (0..n_all).map(|_| None).collect();
        if !roots.is_empty() && !asked.is_empty() {
            let targets: Vec<&Tensor> = asked
                .iter()
                .map(|&i| {
                    if i < self.n {
                        &cut.inputs[i]
                    } else {
                        &frontier[i - self.n]
                    }
                })
                .collect();
            let got = super::ffi::grad(&roots, &their_grads, &targets, create_graph, create_graph)
                .unwrap_or_else(|e| panic!("recompute: backward through the recomputed body: {e}"));
            for (&i, g) in asked.iter().zip(got) {
                out[i] = g.defined().then_some(g);
            }
        }
        cut.open();
        out
    }
}

/// The inputs of a recomputation, detached. Without `create_graph` those
/// that require grad are leaves; with it, each has an identity node into
/// its input's graph as `grad_fn`, closed (passing nothing on) until
/// [`Cut::open`]. Either way the backward through the recomputed body stops
/// at the cut (its gradients are the recompute node's, which the engine
/// passes on), and once open a double backward through the gradients'
/// graph goes on into the inputs' own graph.
struct Cut {
    inputs: Vec<Tensor>,
    pending: *mut c_void,
}

impl Cut {
    fn new(inputs: &[Tensor], create_graph: bool) -> Result<Cut, String> {
        let h = super::ffi::handles(inputs);
        let mut out = vec![std::ptr::null_mut(); inputs.len()];
        let mut pending = std::ptr::null_mut();
        // SAFETY: live handles, only read; room for one handle per input;
        // a writable out-param.
        ffi::check(unsafe {
            tch_scope_recompute_cut(
                h.as_ptr(),
                h.len(),
                create_graph,
                out.as_mut_ptr(),
                &mut pending,
            )
        })?;
        // SAFETY: on success every slot holds a new handle.
        let inputs = unsafe { super::ffi::adopt(out) };
        Ok(Cut { inputs, pending })
    }

    /// Lets gradients through the cut from now on.
    fn open(mut self) {
        let pending = std::mem::replace(&mut self.pending, std::ptr::null_mut());
        // SAFETY: the cut's list, given back once (freed by the call).
        unsafe { tch_scope_recompute_open(pending) }
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        if !self.pending.is_null() {
            // Unwinding from the body: the list is freed (opening nodes
            // that nothing built after the panic can reach).
            // SAFETY: the cut's list, given back once.
            unsafe { tch_scope_recompute_open(self.pending) }
        }
    }
}

/// The tensors outside a body's graph whose gradients it computes: the
/// edges out of the nodes the body made (sequence numbers `first..end`,
/// taken on this thread while it ran) other than into its inputs.
fn frontier(
    outputs: &[Tensor],
    inputs: &[Tensor],
    first: u64,
    end: u64,
) -> Result<Vec<Tensor>, String> {
    let (o, i) = (super::ffi::handles(outputs), super::ffi::handles(inputs));
    let (mut list, mut n) = (std::ptr::null_mut(), 0);
    // SAFETY: live handles, only read; writable out-params.
    ffi::check(unsafe {
        tch_scope_recompute_frontier(
            o.as_ptr(),
            o.len(),
            i.as_ptr(),
            i.len(),
            first,
            end,
            &mut list,
            &mut n,
        )
    })?;
    let mut out = vec![std::ptr::null_mut(); n];
    // SAFETY: the list made above with `n` tensors, taken once.
    unsafe { tch_scope_tensor_list_take(list, out.as_mut_ptr()) };
    // SAFETY: `n` new handles.
    Ok(unsafe { super::ffi::adopt(out) })
}

/// The first run of `f` and the [`Recompute`] node over it: `Err` carries
/// `f`'s panic or libtorch's refusal.
fn apply<F>(inputs: &[&Tensor], f: F) -> Result<Vec<Tensor>, Failure>
where
    F: Fn(&[&Tensor]) -> Vec<Tensor> + Send + 'static,
{
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
    let generators = Generators::save(devices).map_err(|e| {
        Failure::Torch(format!("recompute: cannot save the random generators: {e}"))
    })?;
    // The first run records its graph (freed when it returns), to find the
    // tensors outside it that need gradients: the same peak as the
    // recomputation's in backward.
    let detached: Vec<Tensor> = inputs
        .iter()
        .map(|t| {
            if t.defined() {
                t.detach().set_requires_grad(t.requires_grad())
            } else {
                Tensor::new()
            }
        })
        .collect();
    // SAFETY: reads a thread-local counter.
    let first = unsafe { tch_scope_autograd_sequence_peek() };
    let outputs = {
        let refs: Vec<&Tensor> = detached.iter().collect();
        catch_unwind(AssertUnwindSafe(|| f(&refs))).map_err(Failure::Panic)?
    };
    // SAFETY: as above.
    let end = unsafe { tch_scope_autograd_sequence_peek() };
    let frontier = frontier(&outputs, &detached, first, end).map_err(Failure::Torch)?;
    let outputs: Vec<Tensor> = outputs
        .iter()
        .map(|o| {
            if o.defined() {
                o.detach()
            } else {
                Tensor::new()
            }
        })
        .collect();
    drop(detached);
    let mut all = inputs.to_vec();
    all.extend(&frontier);
    let node = Recompute {
        body: Mutex::new(f),
        n: inputs.len(),
        first: Mutex::new(Some((outputs, generators))),
    };
    node.f_apply(&all)
        .map_err(|e| Failure::Torch(e.to_string()))
}

enum Failure {
    Torch(String),
    Panic(Box<dyn std::any::Any + Send>),
}

/// Activation recomputation, `torch.utils.checkpoint(f, *inputs)` with
/// the random state kept (`preserve_rng_state`): only `inputs` are kept
/// for the backward, which restores the CPU generator (and the CUDA
/// generators of the inputs' devices) and the forward's per-thread scopes
/// (autocast, … through [`Context`]) as they were, runs `f` again with
/// grad on and backpropagates through it. Gradients are bitwise those of
/// calling `f` directly, dropout included; parameters `f` reaches
/// (captured tensors, an `Arc`'d module) get theirs. The generators are
/// put back after the recomputation.
///
/// The parameters `f` reaches are found in its first run, which records
/// its graph while it runs and frees it when it returns (the peak is the
/// recomputation's own); they become inputs of the recompute node, so the
/// engine routes their gradients as it would through `f` itself:
/// - a backward asked for some tensors only (tch's `Tensor::run_backward`,
///   PyTorch's `torch.autograd.grad` or `backward(inputs=…)`) computes
///   exactly those gradients, the captured parameters' included, and
///   writes no `.grad`; the body is not even recomputed when none of them
///   depends on it;
/// - double backward works: with `create_graph` the gradients have a graph
///   through the recomputed body into `f`'s parameters and its inputs'
///   own graph (a gradient penalty gets the plain call's gradients).
///
/// `f` must compute the same graph each time it runs, on the calling
/// thread (tensors that require grad and are made on another thread
/// inside `f` are not seen).
///
/// `f` is kept until the backward, so it owns what it captures (`'static`,
/// `Send`):
/// move in shallow clones ([`Capture`](super::Capture)) or `Arc`s of modules. With grad
/// mode off, or in inference mode, it is a plain call that saves nothing;
/// so a recompute nested in `f` runs plainly in the forward and as a
/// recompute of its own in the recomputation.
///
/// The outputs require grad when an input or a tensor `f` reaches requires
/// grad.
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
    match apply(inputs, f) {
        Ok(out) => out,
        Err(Failure::Panic(p)) => resume_unwind(p),
        Err(Failure::Torch(e)) => panic!("{e}"),
    }
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
        return catch_unwind(AssertUnwindSafe(|| f(inputs)))
            .map_err(|p| TchError::Torch(super::panic_message(&*p)));
    }
    apply(inputs, f).map_err(|e| match e {
        Failure::Torch(e) => TchError::Torch(e),
        Failure::Panic(p) => TchError::Torch(super::panic_message(&*p)),
    })
}
