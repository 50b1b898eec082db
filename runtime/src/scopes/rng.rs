//! `fork_rng` and `seed(n)`: `torch.random.fork_rng()`, optionally with
//! `torch.manual_seed(n)` inside.
//!
//! Entering copies the state of the default CPU generator and of every CUDA
//! device's default generator; leaving puts those states back, so the code
//! after the scope draws exactly the numbers it would have drawn had the
//! scope never run. The generators are **process-wide**: another thread
//! drawing while the scope is open advances the same generators, and its
//! draws are rewound too when the scope ends.

use std::ffi::c_void;
use std::marker::PhantomData;

use crate::{Scope, ScopeError, ffi};

unsafe extern "C" {
    fn tch_scope_rng_save(state: *mut *mut c_void) -> ffi::Status;
    fn tch_scope_rng_restore(state: *const c_void) -> ffi::Status;
    fn tch_scope_rng_free(state: *mut c_void);
    fn tch_scope_rng_seed(seed: u64) -> ffi::Status;
}

/// `torch.random.fork_rng()`: the generators' states are saved on entry and
/// restored on exit; nothing is reseeded.
///
/// ```
/// use tch::{Kind, Tensor};
/// use tch_scope::{ForkRng, Scope};
/// tch::manual_seed(7);
/// let guard = ForkRng.enter().unwrap();
/// let _ = Tensor::rand([100], (Kind::Float, tch::Device::Cpu)); // inside: any draws
/// drop(guard);
/// let after = Tensor::rand([3], (Kind::Float, tch::Device::Cpu));
/// tch::manual_seed(7);
/// assert!(after.equal(&Tensor::rand([3], (Kind::Float, tch::Device::Cpu))));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ForkRng;

/// `fork_rng` + `torch.manual_seed(n)`: every default generator (CPU and
/// each CUDA device) is seeded with `n` inside the scope, and put back as it
/// was on exit.
///
/// ```
/// use tch::{Kind, Tensor};
/// use tch_scope::scoped;
/// let a = scoped!(seed(42) => Tensor::rand([3], (Kind::Float, tch::Device::Cpu)));
/// let b = scoped!(seed(42) => Tensor::rand([3], (Kind::Float, tch::Device::Cpu)));
/// assert!(a.equal(&b));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Seed(pub u64);

/// Restores the generator states saved on entry. `!Send`, like every guard,
/// so scopes unwind in order on one thread's stack.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct RngGuard {
    state: *mut c_void,
    /// `fork_rng` or `seed`, for an exit error.
    scope: &'static str,
    _not_send: PhantomData<*const ()>,
}

fn save(scope: &'static str) -> Result<RngGuard, ScopeError> {
    let mut state = std::ptr::null_mut();
    // SAFETY: `state` is writable; the shim catches C++ exceptions.
    ffi::check(unsafe { tch_scope_rng_save(&mut state) })
        .map_err(|e| ScopeError::new(scope, None, e))?;
    Ok(RngGuard {
        state,
        scope,
        _not_send: PhantomData,
    })
}

impl Scope for ForkRng {
    type Guard = RngGuard;
    type Error = ScopeError;

    fn enter(&mut self) -> Result<RngGuard, ScopeError> {
        save("fork_rng")
    }
}

impl Scope for Seed {
    type Guard = RngGuard;
    type Error = ScopeError;

    fn enter(&mut self) -> Result<RngGuard, ScopeError> {
        let guard = save("seed")?;
        // On failure `guard` drops here and restores what was saved.
        // SAFETY: plain value; the shim catches C++ exceptions.
        ffi::check(unsafe { tch_scope_rng_seed(self.0) })
            .map_err(|e| ScopeError::new("seed", None, e))?;
        Ok(guard)
    }
}

impl Drop for RngGuard {
    fn drop(&mut self) {
        // SAFETY: `state` came from tch_scope_rng_save and is freed once.
        unsafe {
            if let Err(e) = ffi::check(tch_scope_rng_restore(self.state)) {
                crate::exit::report(
                    self.scope,
                    format_args!("could not restore the RNG state: {e}"),
                );
            }
            tch_scope_rng_free(self.state);
        }
    }
}
