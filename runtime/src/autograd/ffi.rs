//! The shim's custom-function calls (`csrc/autograd.h`), and the small
//! conversions between tch's tensors and the shim's `at::Tensor*` handles.

use std::ffi::{c_char, c_void};

use tch::{TchError, Tensor};

use crate::ffi::{self, Status};

/// `tch_scope_autograd_backward_fn`.
pub(crate) type BackwardFn = unsafe extern "C" fn(
    state: *const c_void,
    grads: *const *mut c_void,
    n: usize,
    out: *mut c_void,
) -> i32;
/// `tch_scope_autograd_drop_fn`.
pub(crate) type DropFn = unsafe extern "C" fn(state: *mut c_void);

unsafe extern "C" {
    pub(crate) fn tch_scope_autograd_begin(
        name: *const c_char,
        inputs: *const *mut c_void,
        n: usize,
        node: *mut *mut c_void,
        executable: *mut bool,
    ) -> Status;
    pub(crate) fn tch_scope_autograd_finish(
        node: *mut c_void,
        outputs: *const *mut c_void,
        n: usize,
        state: *mut c_void,
        backward: BackwardFn,
        drop: DropFn,
        wrapped: *mut *mut c_void,
    ) -> Status;
    pub(crate) fn tch_scope_autograd_node_free(node: *mut c_void);
    pub(crate) fn tch_scope_autograd_save_for_backward(
        node: *mut c_void,
        tensors: *const *mut c_void,
        n: usize,
    ) -> Status;
    pub(crate) fn tch_scope_autograd_mark_dirty(
        node: *mut c_void,
        tensors: *const *mut c_void,
        n: usize,
    ) -> Status;
    pub(crate) fn tch_scope_autograd_mark_non_differentiable(
        node: *mut c_void,
        tensors: *const *mut c_void,
        n: usize,
    ) -> Status;
    pub(crate) fn tch_scope_autograd_set_materialize_grads(node: *mut c_void, value: bool);
    pub(crate) fn tch_scope_autograd_needs_input_grad(
        node: *const c_void,
        i: usize,
        out: *mut bool,
    ) -> Status;
    pub(crate) fn tch_scope_autograd_saved(
        node: *const c_void,
        out: *mut *mut c_void,
        cap: usize,
        n: *mut usize,
    ) -> Status;
    pub(crate) fn tch_scope_autograd_out_push(out: *mut c_void, tensor: *const c_void) -> Status;
    pub(crate) fn tch_scope_autograd_out_fail(out: *mut c_void, msg: *const c_char, len: usize);
    fn tch_scope_autograd_grad(
        outputs: *const *mut c_void,
        grad_outputs: *const *mut c_void,
        n_outputs: usize,
        inputs: *const *mut c_void,
        n_inputs: usize,
        retain_graph: bool,
        create_graph: bool,
        out: *mut *mut c_void,
    ) -> Status;
}

/// tch's handles of `tensors`, as the shim reads them (never written).
pub(crate) fn handles<T: std::borrow::Borrow<Tensor>>(tensors: &[T]) -> Vec<*mut c_void> {
    tensors
        .iter()
        .map(|t| t.borrow().as_ptr().cast_mut().cast::<c_void>())
        .collect()
}

/// Takes ownership of handles the shim made.
///
/// # Safety
/// Each pointer is a live `at::Tensor*` from `new`, owned by nobody else.
pub(crate) unsafe fn adopt(raw: Vec<*mut c_void>) -> Vec<Tensor> {
    raw.into_iter()
        // SAFETY: as the caller promises; tch frees it with `delete`.
        .map(|p| unsafe { Tensor::from_ptr(p.cast()) })
        .collect()
}

pub(crate) fn check(status: Status) -> Result<(), TchError> {
    ffi::check(status).map_err(TchError::Torch)
}

/// `torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True)`:
/// undefined tensors where an input was not reached.
pub(crate) fn grad(
    outputs: &[&Tensor],
    grad_outputs: &[&Tensor],
    inputs: &[&Tensor],
    retain_graph: bool,
    create_graph: bool,
) -> Result<Vec<Tensor>, TchError> {
    assert_eq!(outputs.len(), grad_outputs.len());
    let (o, g, i) = (handles(outputs), handles(grad_outputs), handles(inputs));
    let mut out = vec![std::ptr::null_mut(); inputs.len()];
    // SAFETY: live handles, only read; `out` has room for one per input.
    check(unsafe {
        tch_scope_autograd_grad(
            o.as_ptr(),
            g.as_ptr(),
            o.len(),
            i.as_ptr(),
            i.len(),
            retain_graph,
            create_graph,
            out.as_mut_ptr(),
        )
    })?;
    // SAFETY: on success the shim filled every slot with a new handle.
    Ok(unsafe { adopt(out) })
}
