//! [`Ctx`]: what a custom function's `forward` leaves for its `backward`
//! (PyTorch's `ctx`, libtorch's `AutogradContext`).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::ffi::c_void;

use tch::{Device, Kind, Tensor};

use super::ffi as sys;
use crate::Context;

/// What an input looked like at `apply`: a gradient for it must match.
#[derive(Debug, Clone)]
pub(crate) struct InputMeta {
    pub(crate) shape: Vec<i64>,
    pub(crate) kind: Kind,
    pub(crate) device: Device,
}

impl InputMeta {
    /// `None` for an undefined tensor.
    pub(crate) fn of(t: &Tensor) -> Option<InputMeta> {
        if !t.defined() {
            return None;
        }
        Some(InputMeta {
            shape: t.size(),
            kind: t.kind(),
            device: t.device(),
        })
    }
}

/// The context of one application of a [`Function`](super::Function):
/// `forward` gets it as `&mut Ctx` to save what `backward` needs, and
/// `backward` reads it through `&Ctx`, like `ctx` in PyTorch's
/// `torch.autograd.Function`.
///
/// Tensors go through [`save_for_backward`](Ctx::save_for_backward) (libtorch
/// checks them against later in-place changes and frees them after a
/// backward without `retain_graph`); any other value through
/// [`save`](Ctx::save), one per type, kept until the graph node is freed.
pub struct Ctx {
    /// The shim's node (`RustNode*`); it owns the state that owns this
    /// `Ctx`, so it outlives it.
    node: *mut c_void,
    pub(crate) name: &'static str,
    pub(crate) inputs: Vec<Option<InputMeta>>,
    n_saved: usize,
    values: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
    pub(crate) scopes: Option<Context>,
}

// SAFETY: `node` is the libtorch node that owns this context; forward uses
// it through `&mut Ctx` on the applying thread, backward only reads it
// (saved variables, edges) under the node's own mutex, on whichever
// thread the engine runs it. Every other field is Send + Sync.
unsafe impl Send for Ctx {}
// SAFETY: as above: through `&Ctx` the node is only read.
unsafe impl Sync for Ctx {}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("function", &self.name)
            .field("inputs", &self.inputs.len())
            .field("saved_tensors", &self.n_saved)
            .field("values", &self.values.len())
            .field("backward_scopes", &self.scopes.is_some())
            .finish()
    }
}

fn fail<T>(name: &str, what: &str, e: tch::TchError) -> T {
    panic!("{what} of {name}: {e}")
}

impl Ctx {
    pub(crate) fn new(
        node: *mut c_void,
        name: &'static str,
        inputs: Vec<Option<InputMeta>>,
    ) -> Ctx {
        Ctx {
            node,
            name,
            inputs,
            n_saved: 0,
            values: HashMap::new(),
            scopes: None,
        }
    }

    /// `ctx.save_for_backward(*tensors)`: inputs, outputs or intermediate
    /// tensors that `backward` reads back with
    /// [`saved_tensors`](Ctx::saved_tensors). Call it once; a second call
    /// replaces the first list.
    ///
    /// # Panics
    /// If libtorch refuses (out of memory).
    pub fn save_for_backward(&mut self, tensors: &[&Tensor]) {
        let h = sys::handles(tensors);
        // SAFETY: our live node; live handles, only read (copied).
        let status =
            unsafe { sys::tch_scope_autograd_save_for_backward(self.node, h.as_ptr(), h.len()) };
        sys::check(status).unwrap_or_else(|e| fail(self.name, "save_for_backward", e));
        self.n_saved = tensors.len();
    }

    /// `ctx.saved_tensors`: what `forward` saved, in order (empty during
    /// `forward`).
    ///
    /// # Panics
    /// If a saved tensor was modified in place after it was saved, or the
    /// graph was already freed by a backward without `retain_graph`
    /// (libtorch's messages); in `backward` that panic becomes the error of
    /// the `backward()` call.
    pub fn saved_tensors(&self) -> Vec<Tensor> {
        let mut cap = self.n_saved;
        loop {
            let mut out = vec![std::ptr::null_mut(); cap];
            let mut n = 0;
            // SAFETY: our live node; `out` has room for `cap` handles.
            let status =
                unsafe { sys::tch_scope_autograd_saved(self.node, out.as_mut_ptr(), cap, &mut n) };
            sys::check(status).unwrap_or_else(|e| fail(self.name, "saved_tensors", e));
            if n <= cap {
                out.truncate(n);
                // SAFETY: the shim filled the first `n` slots with new handles.
                return unsafe { sys::adopt(out) };
            }
            cap = n;
        }
    }

    /// `ctx.needs_input_grad[i]`: whether input `i` needs a gradient (in
    /// `backward`: whether this backward pass asks for it).
    ///
    /// # Panics
    /// If `i` is not an input's index.
    pub fn needs_input_grad(&self, i: usize) -> bool {
        let mut out = false;
        // SAFETY: our live node; a writable out-param.
        let status = unsafe { sys::tch_scope_autograd_needs_input_grad(self.node, i, &mut out) };
        sys::check(status).unwrap_or_else(|e| fail(self.name, "needs_input_grad", e));
        out
    }

    /// `ctx.mark_non_differentiable(*outputs)`: these outputs (as returned
    /// by `forward`) do not require grad, and their gradients given to
    /// `backward` are zeros (or undefined without materializing).
    ///
    /// # Panics
    /// If libtorch refuses.
    pub fn mark_non_differentiable(&mut self, outputs: &[&Tensor]) {
        let h = sys::handles(outputs);
        // SAFETY: our live node; live handles, only read.
        let status = unsafe {
            sys::tch_scope_autograd_mark_non_differentiable(self.node, h.as_ptr(), h.len())
        };
        sys::check(status).unwrap_or_else(|e| fail(self.name, "mark_non_differentiable", e));
    }

    /// `ctx.mark_dirty(*inputs)`: `forward` modified these inputs in place
    /// (and returns them as outputs); their history is rebased onto this
    /// function. An input is reached through `inputs[i].shallow_clone()`,
    /// which shares its tensor.
    ///
    /// # Panics
    /// If libtorch refuses.
    pub fn mark_dirty(&mut self, inputs: &[&Tensor]) {
        let h = sys::handles(inputs);
        // SAFETY: our live node; live handles, only read.
        let status = unsafe { sys::tch_scope_autograd_mark_dirty(self.node, h.as_ptr(), h.len()) };
        sys::check(status).unwrap_or_else(|e| fail(self.name, "mark_dirty", e));
    }

    /// `ctx.set_materialize_grads(value)`: with `false`, `backward` gets an
    /// undefined tensor (`!g.defined()`, PyTorch's `None`) for an output
    /// whose gradient is absent, instead of zeros.
    pub fn set_materialize_grads(&mut self, value: bool) {
        // SAFETY: our live node.
        unsafe { sys::tch_scope_autograd_set_materialize_grads(self.node, value) }
    }

    /// Keeps a value for `backward`, one per type (a second `save` of the
    /// same type replaces the first); it lives until the graph node is
    /// freed (PyTorch's `ctx.attr = value`).
    pub fn save<T: Send + Sync + 'static>(&mut self, value: T) {
        self.values.insert(TypeId::of::<T>(), Box::new(value));
    }

    /// The value of type `T` that `forward` [saved](Ctx::save), if any.
    pub fn get<T: 'static>(&self) -> Option<&T> {
        self.values.get(&TypeId::of::<T>())?.downcast_ref()
    }

    /// Opt-in, as `torch.amp.custom_fwd` / `custom_bwd`: captures the
    /// per-thread scopes open now (autocast and the others a
    /// [`Context`] carries; call it in `forward`) and re-enters them around
    /// `backward`, on whichever thread the engine runs it. Grad mode in
    /// `backward` stays the engine's (on only with `create_graph`).
    pub fn set_backward_scopes(&mut self, on: bool) {
        self.scopes = on.then(Context::capture);
    }

    /// The [`Context`] kept by [`set_backward_scopes`](Ctx::set_backward_scopes).
    pub fn backward_scopes(&self) -> Option<&Context> {
        self.scopes.as_ref()
    }
}
