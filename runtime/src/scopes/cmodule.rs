//! [`Trainable`] for TorchScript modules: [`tch::CModule`] and
//! [`tch::TrainableCModule`].
//!
//! TorchScript's `train()`/`eval()` recurse into submodules, so "the
//! previous mode" is one flag per submodule: the shim (`csrc/module.cpp`)
//! reads them in `modules()` order and puts each back on its own module.
//! The saved modes are the shim's list of submodules with their flags
//! ([`ModuleModes`]), so leaving a scope does not walk the modules again.

use std::ffi::c_void;
use std::mem::{align_of, size_of};
use std::ptr::NonNull;
use std::sync::OnceLock;

use tch::{CModule, TchError, TrainableCModule};

use crate::Trainable;
use crate::ffi;
use crate::scopes::train::refuse_served;

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

unsafe extern "C" {
    fn tch_scope_module_save(module: *mut c_void, saved: *mut *mut c_void) -> ffi::Status;
    fn tch_scope_module_enter(
        module: *mut c_void,
        on: bool,
        saved: *mut *mut c_void,
    ) -> ffi::Status;
    fn tch_scope_module_set_training(module: *mut c_void, on: bool) -> ffi::Status;
    fn tch_scope_module_leave(saved: *const c_void) -> ffi::Status;
    fn tch_scope_module_saved_modes(saved: *const c_void, out: *mut u8, cap: usize) -> usize;
    fn tch_scope_module_saved_free(saved: *mut c_void);
}

fn check(status: ffi::Status) -> Result<(), TchError> {
    ffi::check(status).map_err(TchError::Torch)
}

/// The saved train/eval flags of a TorchScript module and every submodule,
/// in `modules()` order — [`Trainable::Modes`] of [`CModule`] and
/// [`TrainableCModule`]. It holds the module objects themselves, so
/// restoring puts each flag back on the object it was read from (a
/// submodule swapped in meanwhile is left alone), without walking the
/// modules again. Reads as a `[bool]`.
///
/// ```no_run
/// use tch_scope::Trainable;
/// let model = tch::CModule::load("model.pt").unwrap();
/// let saved = model.modes().unwrap();
/// model.set_training(false).unwrap();
/// assert!(saved.iter().all(|&training| training));
/// model.restore_modes(saved).unwrap();
/// ```
pub struct ModuleModes {
    saved: NonNull<c_void>,
    flags: OnceLock<Vec<bool>>,
}

// SAFETY: the shim's list holds only reference-counted (atomically)
// pointers to the module objects, and is read and written under the shim's
// mode lock (the saved flags never change); freeing it from any thread is
// fine.
unsafe impl Send for ModuleModes {}
// SAFETY: as above; `&self` only reads the immutable saved flags, or
// restores under the shim's lock.
unsafe impl Sync for ModuleModes {}

impl ModuleModes {
    fn new(call: impl FnOnce(*mut *mut c_void) -> ffi::Status) -> Result<Self, TchError> {
        let mut saved = std::ptr::null_mut();
        check(call(&mut saved))?;
        let saved = NonNull::new(saved)
            .ok_or_else(|| TchError::Torch("the shim saved no module modes".into()))?;
        Ok(Self {
            saved,
            flags: OnceLock::new(),
        })
    }

    fn restore(&self) -> Result<(), TchError> {
        // SAFETY: `self.saved` came from the shim and is not freed yet.
        check(unsafe { tch_scope_module_leave(self.saved.as_ptr()) })
    }
}

impl std::ops::Deref for ModuleModes {
    type Target = [bool];

    fn deref(&self) -> &[bool] {
        self.flags.get_or_init(|| {
            let saved = self.saved.as_ptr();
            // SAFETY: a live handle; with `cap` 0 nothing is written.
            let n = unsafe { tch_scope_module_saved_modes(saved, std::ptr::null_mut(), 0) };
            let mut bytes = vec![0u8; n];
            // SAFETY: `bytes` holds `n` writable bytes.
            unsafe { tch_scope_module_saved_modes(saved, bytes.as_mut_ptr(), n) };
            bytes.into_iter().map(|b| b != 0).collect()
        })
    }
}

impl PartialEq for ModuleModes {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl PartialEq<Vec<bool>> for ModuleModes {
    fn eq(&self, other: &Vec<bool>) -> bool {
        **self == **other
    }
}

impl PartialEq<[bool]> for ModuleModes {
    fn eq(&self, other: &[bool]) -> bool {
        **self == *other
    }
}

impl std::fmt::Debug for ModuleModes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Drop for ModuleModes {
    fn drop(&mut self) {
        // SAFETY: from the shim; freed only here, once.
        unsafe { tch_scope_module_saved_free(self.saved.as_ptr()) }
    }
}

fn save(m: *mut c_void) -> Result<ModuleModes, TchError> {
    // SAFETY: `m` is a live module borrowed by the caller; `saved` is writable.
    ModuleModes::new(|saved| unsafe { tch_scope_module_save(m, saved) })
}

fn enter(m: *mut c_void, on: bool) -> Result<ModuleModes, TchError> {
    // SAFETY: as for `save`.
    ModuleModes::new(|saved| unsafe { tch_scope_module_enter(m, on, saved) })
}

fn set_training(m: *mut c_void, on: bool) -> Result<(), TchError> {
    // SAFETY: `m` is a live module borrowed by the caller.
    check(unsafe { tch_scope_module_set_training(m, on) })
}

macro_rules! trainable_module {
    ($ty:ty, $ptr:ident) => {
        impl Trainable for $ty {
            type Modes = ModuleModes;

            fn modes(&self) -> Result<ModuleModes, TchError> {
                save($ptr(self))
            }

            /// # Errors
            /// Also refused while an [`Inference`](crate::Inference)
            /// serves the module.
            fn set_training(&self, on: bool) -> Result<(), TchError> {
                refuse_served(self.model_id(), "set_training")?;
                set_training($ptr(self), on)
            }

            /// # Errors
            /// Also refused while an [`Inference`](crate::Inference)
            /// serves the module.
            fn restore_modes(&self, modes: ModuleModes) -> Result<(), TchError> {
                refuse_served(self.model_id(), "restore_modes")?;
                modes.restore()
            }

            fn switch_training(&self, on: bool) -> Result<ModuleModes, TchError> {
                refuse_served(self.model_id(), "switch_training")?;
                enter($ptr(self), on)
            }
        }
    };
}

trainable_module!(CModule, module_ptr);
trainable_module!(TrainableCModule, trainable_ptr);
