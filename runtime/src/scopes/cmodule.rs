//! [`Trainable`] for TorchScript modules: [`tch::CModule`] and
//! [`tch::TrainableCModule`].
//!
//! TorchScript's `train()`/`eval()` recurse into submodules, so "the
//! previous mode" is one flag per submodule: the shim (`csrc/module.cpp`)
//! reads them in `modules()` order and puts each back on its own module.
//! A scope's guard keeps the shim's list of submodules from entry
//! ([`ModuleModes`]), so leaving does not walk the modules again.

use std::ffi::c_void;
use std::mem::{align_of, size_of};
use std::ptr::NonNull;

use tch::{CModule, TchError, TrainableCModule};

use crate::Trainable;
use crate::ffi;
use crate::train::SavedModes;

// tch keeps the `torch::jit::Module*` in a private field
// (`CModule { c_module: *mut CModule_ }`, tch 0.26 `wrappers/jit.rs`) and
// offers no public accessor (only `Debug` prints it). Both types below are
// exactly one pointer: a struct as large as its only field holds that field
// at offset 0, so its bytes *are* the pointer, and `transmute_copy` reads it
// without taking ownership. These assertions stop the build if a tch
// release ever adds a field.
const _: () = {
    assert!(size_of::<CModule>() == size_of::<*mut c_void>());
    assert!(align_of::<CModule>() == align_of::<*mut c_void>());
    assert!(size_of::<TrainableCModule>() == size_of::<*mut c_void>());
    assert!(align_of::<TrainableCModule>() == align_of::<*mut c_void>());
};

/// The `torch::jit::Module*` inside a `CModule`.
fn module_ptr(m: &CModule) -> *mut c_void {
    // SAFETY: `CModule` is exactly its one pointer field (asserted above);
    // copying its bits neither frees nor aliases mutably.
    unsafe { std::mem::transmute_copy::<CModule, *mut c_void>(m) }
}

/// The `torch::jit::Module*` inside a `TrainableCModule` (`{ inner: CModule }`).
fn trainable_ptr(m: &TrainableCModule) -> *mut c_void {
    // SAFETY: as for `module_ptr`: one field, a `CModule`, which is one pointer.
    unsafe { std::mem::transmute_copy::<TrainableCModule, *mut c_void>(m) }
}

fn check(status: ffi::Status) -> Result<(), TchError> {
    ffi::check(status).map_err(TchError::Torch)
}

/// Most models have fewer modules than this: one shim call, no resize.
const FIRST_TRY: usize = 32;

/// Calls a shim function that writes up to `cap` modes and sets `*n` to the
/// number of modules: first into a stack buffer, again with room if the
/// model has more modules than that (the shim changes nothing then).
fn read_modes(
    call: impl Fn(*mut u8, usize, &mut usize) -> ffi::Status,
) -> Result<Vec<bool>, TchError> {
    let mut buf = [0u8; FIRST_TRY];
    let mut n = 0usize;
    check(call(buf.as_mut_ptr(), buf.len(), &mut n))?;
    if n <= FIRST_TRY {
        return Ok(buf[..n].iter().map(|&b| b != 0).collect());
    }
    let mut big = vec![0u8; n];
    let mut again = 0usize;
    check(call(big.as_mut_ptr(), n, &mut again))?;
    big.truncate(again.min(n));
    Ok(big.into_iter().map(|b| b != 0).collect())
}

fn modes(m: *mut c_void) -> Result<Vec<bool>, TchError> {
    // SAFETY: `m` is a live module (borrowed by the caller); `out` holds `cap` bytes.
    read_modes(|out, cap, n| unsafe { ffi::tch_scope_module_modes(m, out, cap, n) })
}

fn exchange(m: *mut c_void, on: bool) -> Result<Vec<bool>, TchError> {
    // SAFETY: as for `modes`.
    read_modes(|out, cap, n| unsafe { ffi::tch_scope_module_exchange(m, on, out, cap, n) })
}

fn set_training(m: *mut c_void, on: bool) -> Result<(), TchError> {
    // SAFETY: `m` is a live module borrowed by the caller.
    check(unsafe { ffi::tch_scope_module_set_training(m, on) })
}

fn restore_modes(m: *mut c_void, modes: &[bool]) -> Result<(), TchError> {
    // `bool` is one byte, 0 or 1: the layout the shim reads.
    let bytes = modes.as_ptr().cast::<u8>();
    // SAFETY: `m` is live; `bytes` points at `modes.len()` readable bytes.
    check(unsafe { ffi::tch_scope_module_restore_modes(m, bytes, modes.len()) })
}

/// A scope's saved modes of a TorchScript module, from
/// `tch_scope_module_enter`: each module's object (a strong reference),
/// its `training` slot and its flag on entry. Owned: freed once, on drop.
pub(crate) struct ModuleModes(NonNull<c_void>);

// SAFETY: the shim's list holds only reference-counted (atomically)
// pointers to the module objects, and is read and written under the shim's
// mode lock; freeing it from any thread is fine.
unsafe impl Send for ModuleModes {}
// SAFETY: `restore` (the only `&self` use) takes the shim's mode lock.
unsafe impl Sync for ModuleModes {}

impl ModuleModes {
    /// Puts each saved flag back on its own module.
    pub(crate) fn restore(&self) -> Result<(), TchError> {
        // SAFETY: `self.0` came from tch_scope_module_enter and is not freed yet.
        check(unsafe { ffi::tch_scope_module_leave(self.0.as_ptr()) })
    }
}

impl Drop for ModuleModes {
    fn drop(&mut self) {
        // SAFETY: from tch_scope_module_enter; freed only here, once.
        unsafe { ffi::tch_scope_module_saved_free(self.0.as_ptr()) }
    }
}

fn enter(m: *mut c_void, on: bool) -> Result<SavedModes<Vec<bool>>, TchError> {
    let mut saved = std::ptr::null_mut();
    // SAFETY: `m` is a live module borrowed by the caller; `saved` is writable.
    check(unsafe { ffi::tch_scope_module_enter(m, on, &mut saved) })?;
    let saved = NonNull::new(saved)
        .ok_or_else(|| TchError::Torch("the shim saved no module modes".into()))?;
    Ok(SavedModes::module(ModuleModes(saved)))
}

/// A TorchScript module: `modes` is each module's own `training` flag, the
/// module itself first, then its submodules depth-first (`modules()`
/// order). `set_training` recurses like `module.train(on)`;
/// `restore_modes` sets each flag back on its own module, so a model whose
/// submodules were in mixed modes gets exactly those back.
///
/// The mode is state of the module, shared by every thread using it (as in
/// PyTorch): don't switch a module that another thread is running.
///
/// ```
/// use tch_scope::{Trainable, scoped};
/// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/bn_dropout.pt");
/// let model = tch::CModule::load(path).unwrap(); // saved in training mode
/// let x = tch::Tensor::zeros([2, 4], (tch::Kind::Float, tch::Device::Cpu));
/// let (y, inside) = scoped!(no_grad, eval(model) => {
///     (model.forward_ts(&[&x]).unwrap(), model.modes().unwrap())
/// });
/// assert_eq!(inside, [false; 5]); // the model and its 4 submodules
/// assert_eq!(model.modes().unwrap(), [true; 5]); // back in training mode
/// # let _ = y;
/// ```
impl Trainable for CModule {
    type Modes = Vec<bool>;

    fn modes(&self) -> Result<Vec<bool>, TchError> {
        modes(module_ptr(self))
    }

    fn set_training(&self, on: bool) -> Result<(), TchError> {
        set_training(module_ptr(self), on)
    }

    fn restore_modes(&self, modes: Vec<bool>) -> Result<(), TchError> {
        restore_modes(module_ptr(self), &modes)
    }

    fn switch_training(&self, on: bool) -> Result<Vec<bool>, TchError> {
        exchange(module_ptr(self), on)
    }

    fn __enter_mode(&self, on: bool) -> Result<SavedModes<Vec<bool>>, TchError> {
        enter(module_ptr(self), on)
    }
}

/// As for [`CModule`]: one flag per submodule.
///
/// ```
/// use tch_scope::{Trainable, scoped};
/// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/mixed_modes.pt");
/// let vs = tch::nn::VarStore::new(tch::Device::Cpu);
/// let model = tch::TrainableCModule::load(path, vs.root()).unwrap();
/// let saved = model.modes().unwrap(); // submodules in mixed modes
/// let x = tch::Tensor::zeros([2, 4], (tch::Kind::Float, tch::Device::Cpu));
/// let y = scoped!(eval(model) => model.forward_ts(&[&x]).unwrap());
/// assert_eq!(model.modes().unwrap(), saved); // each flag as it was
/// # let _ = y;
/// ```
impl Trainable for TrainableCModule {
    type Modes = Vec<bool>;

    fn modes(&self) -> Result<Vec<bool>, TchError> {
        modes(trainable_ptr(self))
    }

    fn set_training(&self, on: bool) -> Result<(), TchError> {
        set_training(trainable_ptr(self), on)
    }

    fn restore_modes(&self, modes: Vec<bool>) -> Result<(), TchError> {
        restore_modes(trainable_ptr(self), &modes)
    }

    fn switch_training(&self, on: bool) -> Result<Vec<bool>, TchError> {
        exchange(trainable_ptr(self), on)
    }

    fn __enter_mode(&self, on: bool) -> Result<SavedModes<Vec<bool>>, TchError> {
        enter(trainable_ptr(self), on)
    }
}
