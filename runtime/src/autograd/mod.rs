//! Custom autograd functions, `gradcheck` and activation recomputation:
//! PyTorch's `torch.autograd.Function`, `torch.autograd.gradcheck` and
//! `torch.utils.checkpoint`, over libtorch's own custom-function node
//! (`csrc/autograd.cpp`).
//!
//! ```
//! use tch::{Device, Kind, Tensor};
//! use tch_scope::autograd::{Ctx, Function};
//!
//! /// y = x * c, by hand.
//! struct MulConstant(f64);
//!
//! impl Function for MulConstant {
//!     fn forward(&self, _ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
//!         vec![inputs[0] * self.0]
//!     }
//!     fn backward(&self, _ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
//!         vec![Some(&grads[0] * self.0)]
//!     }
//! }
//!
//! let x = Tensor::ones([3], (Kind::Double, Device::Cpu)).set_requires_grad(true);
//! let y = MulConstant(2.5).apply1(&[&x]); // `apply`: every output, a `Vec`
//! y.sum(Kind::Double).backward();
//! assert_eq!(Vec::<f64>::try_from(x.grad()).unwrap(), [2.5, 2.5, 2.5]);
//! ```
//!
//! # Semantics (PyTorch's)
//! - `forward` runs with grad mode off; each output that requires grad has
//!   the function's node as its `grad_fn` (when grad mode is on and an
//!   input requires grad). Integer outputs and those
//!   [marked](Ctx::mark_non_differentiable) are not differentiable.
//! - `backward` gets one gradient per output (zeros where absent, unless
//!   [`Ctx::set_materialize_grads`]`(false)`) and returns one `Option` per
//!   input, `None` for no gradient (extra trailing `None`s are allowed).
//!   A wrong count, or a gradient whose dtype or device differs from its
//!   input's or whose shape the input's shape cannot be broadcast to, is
//!   an error of the `backward()` call naming the function (its Rust type
//!   name) and the index. A gradient of a broadcast shape is summed to the
//!   input's shape, as libtorch does.
//! - `backward` may use differentiable operations: with `create_graph` its
//!   result has a graph of its own (double backward).
//! - [`Function::apply`] returns every output; [`Function::apply1`] the
//!   one output of a function that has one (no output or several: an
//!   error naming the function).
//! - A panic in `forward`: [`Function::apply`] and [`Function::apply1`]
//!   panic with it, [`Function::f_apply`] and [`Function::f_apply1`]
//!   return `Err`. A panic in `backward` never unwinds into libtorch: it
//!   becomes the error of `f_backward()` (tch's `backward()` panics with
//!   its message) and autograd stays usable.
//! - `backward` may run on another thread (the engine's device threads on
//!   CUDA): functions are `Send + Sync`, and may be applied from many
//!   threads at once.

mod capture;
mod ctx;
pub(crate) mod ffi;
mod gradcheck;
mod recompute;

use std::any::type_name;
use std::ffi::{CString, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use tch::{TchError, Tensor};

pub use capture::Capture;
pub use ctx::Ctx;
use ctx::InputMeta;
pub use gradcheck::{GradcheckError, gradcheck};
pub use recompute::{f_recompute, recompute};

use crate::{Scope, ScopeError};

#[doc(hidden)]
pub use tch as __tch;

/// `#[recompute]`'s one output.
#[doc(hidden)]
pub fn __one_output(outputs: Vec<Tensor>) -> Tensor {
    __next_output(&mut outputs.into_iter())
}

/// `#[recompute]`'s next output of a tuple.
#[doc(hidden)]
pub fn __next_output(outputs: &mut impl Iterator<Item = Tensor>) -> Tensor {
    outputs
        .next()
        .expect("tch-scope: a recomputed function returned fewer outputs than its body")
}

/// A custom autograd function: PyTorch's `torch.autograd.Function`, with
/// its parameters (constants, options) as the value's own fields.
///
/// See the [module docs](self) for the semantics.
pub trait Function: Send + Sync + 'static {
    /// Computes the outputs, with grad mode off. Save what `backward`
    /// needs in `ctx`.
    fn forward(&self, ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor>;

    /// Given one gradient per output, returns one per input (`None`: no
    /// gradient).
    fn backward(&self, ctx: &Ctx, grad_outputs: &[Tensor]) -> Vec<Option<Tensor>>;

    /// Applies the function: `MulConstant(2.5).apply(&[&x])`.
    ///
    /// # Panics
    /// Like tch's operators, with libtorch's message when it refuses
    /// (`mark_dirty` on a leaf that requires grad, …); with the forward's
    /// own panic when `forward` panics.
    fn apply(self, inputs: &[&Tensor]) -> Vec<Tensor>
    where
        Self: Sized,
    {
        match apply_impl(self, inputs) {
            Ok(out) => out,
            Err(Failure::Panic(p)) => resume_unwind(p),
            Err(Failure::Torch(e)) => panic!("{e}"),
        }
    }

    /// Applies a function of one output and returns that output:
    /// `let y = MulConstant(2.5).apply1(&[&x]);`, as PyTorch's
    /// `Function.apply` returns the tensor itself when `forward` returns
    /// one. Bitwise what [`apply`](Self::apply) returns, without the `Vec`.
    ///
    /// # Panics
    /// As [`apply`](Self::apply) does, and with
    /// [`f_apply1`](Self::f_apply1)'s message when `forward` returned no
    /// output or several.
    fn apply1(self, inputs: &[&Tensor]) -> Tensor
    where
        Self: Sized,
    {
        let outputs = self.apply(inputs);
        single::<Self>(outputs, inputs).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Applies a function of one output and returns that output, or why
    /// not.
    ///
    /// # Errors
    /// A [`ScopeError`] of [stage](crate::Stage) `Run` naming the function
    /// (its Rust type name) and the first input's device: "cannot run
    /// `my_crate::Split` on cpu: its forward returned 2 outputs; `apply1`
    /// takes exactly one (`apply` returns them all)", or with libtorch's
    /// refusal, or with `forward`'s panic message.
    fn f_apply1(self, inputs: &[&Tensor]) -> Result<Tensor, ScopeError>
    where
        Self: Sized,
    {
        let outputs = apply_impl(self, inputs).map_err(|e| {
            let reason = match e {
                Failure::Torch(TchError::Torch(msg)) => msg,
                Failure::Torch(e) => e.to_string(),
                Failure::Panic(p) => format!("its forward panicked: {}", panic_message(&*p)),
            };
            run_error::<Self>(inputs, reason)
        })?;
        single::<Self>(outputs, inputs)
    }

    /// Applies the function, returning libtorch's error, or a panic of
    /// `forward` as an error with its message.
    ///
    /// # Errors
    /// [`TchError::Torch`] with the message.
    fn f_apply(self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, TchError>
    where
        Self: Sized,
    {
        apply_impl(self, inputs).map_err(|e| match e {
            Failure::Torch(e) => e,
            Failure::Panic(p) => TchError::Torch(format!(
                "forward of {} panicked: {}",
                type_name::<Self>(),
                panic_message(&*p)
            )),
        })
    }
}

/// `apply1`'s one output, or an error naming `F`.
fn single<F>(mut outputs: Vec<Tensor>, inputs: &[&Tensor]) -> Result<Tensor, ScopeError> {
    match outputs.len() {
        1 => Ok(outputs.remove(0)),
        n => Err(run_error::<F>(
            inputs,
            format!(
                "its forward returned {n} outputs; `apply1` takes exactly one (`apply` returns them all)"
            ),
        )),
    }
}

/// An error of applying `F`, on its first input's device.
fn run_error<F>(inputs: &[&Tensor], reason: String) -> ScopeError {
    let device = inputs.iter().find(|t| t.defined()).map(|t| t.device());
    ScopeError::run(type_name::<F>(), device, reason)
}

enum Failure {
    Torch(TchError),
    Panic(Box<dyn std::any::Any + Send>),
}

pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

/// What the node owns: the function and its context.
struct State<F> {
    func: F,
    ctx: Ctx,
}

/// The reference `tch_scope_autograd_begin` returned.
struct NodeRef(*mut c_void);

impl Drop for NodeRef {
    fn drop(&mut self) {
        // SAFETY: begin's reference, given back once.
        unsafe { ffi::tch_scope_autograd_node_free(self.0) }
    }
}

fn apply_impl<F: Function>(func: F, inputs: &[&Tensor]) -> Result<Vec<Tensor>, Failure> {
    let name = type_name::<F>();
    let cname = CString::new(name).unwrap_or_else(|_| c"custom function".to_owned());
    let h = ffi::handles(inputs);
    let (mut node, mut executable) = (std::ptr::null_mut(), false);
    // SAFETY: live handles, only read; writable out-params.
    let status = unsafe {
        ffi::tch_scope_autograd_begin(
            cname.as_ptr(),
            h.as_ptr(),
            h.len(),
            &mut node,
            &mut executable,
        )
    };
    ffi::check(status).map_err(Failure::Torch)?;
    let node = NodeRef(node);
    let meta = inputs.iter().map(|t| InputMeta::of(t)).collect();
    let mut state = Box::new(State {
        func,
        ctx: Ctx::new(node.0, name, meta),
    });
    let outputs = {
        let Ok(_no_grad) = crate::NoGrad.enter();
        let State { func, ctx } = &mut *state;
        catch_unwind(AssertUnwindSafe(|| func.forward(ctx, inputs)))
    };
    // On a panic `state` drops here, then the node.
    let outputs = outputs.map_err(Failure::Panic)?;
    let out = ffi::handles(&outputs);
    let mut wrapped = vec![std::ptr::null_mut(); outputs.len()];
    // SAFETY: the live node; live handles, only read; the node takes the
    // state (freed through `drop_state::<F>`, which matches its type);
    // `wrapped` has room for one handle per output.
    let status = unsafe {
        ffi::tch_scope_autograd_finish(
            node.0,
            out.as_ptr(),
            out.len(),
            Box::into_raw(state).cast(),
            backward_trampoline::<F>,
            drop_state::<F>,
            wrapped.as_mut_ptr(),
        )
    };
    drop(outputs);
    ffi::check(status).map_err(Failure::Torch)?;
    // SAFETY: on success every slot holds a new handle.
    Ok(unsafe { ffi::adopt(wrapped) })
}

/// Frees the node's Rust state (on any thread, when the node goes).
unsafe extern "C" fn drop_state<F: Function>(state: *mut c_void) {
    // SAFETY: the `Box<State<F>>` apply handed over, freed once.
    let state = unsafe { Box::from_raw(state.cast::<State<F>>()) };
    // A panicking destructor must not unwind into libtorch.
    if let Err(p) = catch_unwind(AssertUnwindSafe(move || drop(state))) {
        crate::exit::report(
            "autograd::Function",
            format!(
                "dropping {} panicked: {}",
                type_name::<F>(),
                panic_message(&*p)
            ),
        );
    }
}

/// The node's `apply`, in Rust: never unwinds.
unsafe extern "C" fn backward_trampoline<F: Function>(
    state: *const c_void,
    grads: *const *mut c_void,
    n: usize,
    out: *mut c_void,
) -> i32 {
    // SAFETY: the state the node owns, alive while it applies.
    let state = unsafe { &*state.cast::<State<F>>() };
    // SAFETY: `n` new handles, ours now.
    let grads = unsafe { ffi::adopt((0..n).map(|i| *grads.add(i)).collect()) };
    let result =
        catch_unwind(AssertUnwindSafe(|| run_backward(state, &grads))).unwrap_or_else(|p| {
            Err(format!(
                "backward of {} panicked: {}",
                type_name::<F>(),
                panic_message(&*p)
            ))
        });
    drop(grads);
    let result = result.and_then(|results| {
        for g in &results {
            let p = g
                .as_ref()
                .map_or(std::ptr::null(), |g| g.as_ptr().cast::<c_void>());
            // SAFETY: the shim's result list; a live handle (copied) or NULL.
            ffi::check(unsafe { ffi::tch_scope_autograd_out_push(out, p) })
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    match result {
        Ok(()) => 0,
        Err(msg) => {
            // SAFETY: the shim's result slot; `msg` is valid for its length.
            unsafe { ffi::tch_scope_autograd_out_fail(out, msg.as_ptr().cast(), msg.len()) };
            1
        }
    }
}

fn run_backward<F: Function>(
    state: &State<F>,
    grads: &[Tensor],
) -> Result<Vec<Option<Tensor>>, String> {
    let ctx = &state.ctx;
    let results = match &ctx.scopes {
        None => state.func.backward(ctx, grads),
        Some(scopes) => {
            let grad = crate::is_grad_enabled();
            let mut scopes: &crate::Context = scopes;
            let _scopes = scopes
                .enter()
                .map_err(|e| format!("backward of {}: {e}", ctx.name))?;
            let Ok(_grad) = crate::Grad(grad).enter();
            state.func.backward(ctx, grads)
        }
    };
    validate(ctx, results)
}

/// Checks `backward`'s results against the inputs: one per input (extra
/// trailing `None`s dropped), each of its input's dtype and device and a
/// shape its input's broadcasts to.
fn validate(ctx: &Ctx, mut results: Vec<Option<Tensor>>) -> Result<Vec<Option<Tensor>>, String> {
    let name = ctx.name;
    let n = ctx.inputs.len();
    if results.len() > n
        && results[n..]
            .iter()
            .all(|g| g.as_ref().is_none_or(|g| !g.defined()))
    {
        results.truncate(n);
    }
    if results.len() != n {
        return Err(format!(
            "backward of {name} returned {} gradients, expected {n} (one per input)",
            results.len()
        ));
    }
    for (i, (g, meta)) in results.iter_mut().zip(&ctx.inputs).enumerate() {
        let Some(t) = g else { continue };
        if !t.defined() {
            *g = None;
            continue;
        }
        let Some(m) = meta else {
            return Err(format!(
                "backward of {name} returned a gradient at index {i} for an undefined input"
            ));
        };
        if t.kind() != m.kind {
            return Err(format!(
                "backward of {name} returned a gradient of dtype {:?} at index {i}, expected {:?} (the input's)",
                t.kind(),
                m.kind
            ));
        }
        if t.device() != m.device {
            return Err(format!(
                "backward of {name} returned a gradient on {:?} at index {i}, expected {:?} (the input's)",
                t.device(),
                m.device
            ));
        }
        let shape = t.size();
        if shape != m.shape && !expandable(&m.shape, &shape) {
            return Err(format!(
                "backward of {name} returned a gradient of shape {shape:?} at index {i}, expected {:?} (the input's)",
                m.shape
            ));
        }
    }
    Ok(results)
}

/// Whether `from` broadcasts to `to` (libtorch's `is_expandable_to`).
fn expandable(from: &[i64], to: &[i64]) -> bool {
    if from.len() > to.len() {
        return false;
    }
    from.iter()
        .rev()
        .zip(to.iter().rev())
        .all(|(&f, &t)| f == t || f == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expandable_follows_broadcasting() {
        assert!(expandable(&[3], &[2, 3]));
        assert!(expandable(&[1, 3], &[4, 3]));
        assert!(expandable(&[], &[2]));
        assert!(!expandable(&[2], &[3]));
        assert!(!expandable(&[2, 3], &[3]));
    }

    #[test]
    fn ctx_and_functions_are_send_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Ctx>();
        send_sync::<State<Box<dyn Function>>>();
    }
}
