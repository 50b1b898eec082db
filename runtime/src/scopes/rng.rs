//! `fork_rng` and `seed(n)`: `torch.random.fork_rng()`, optionally with
//! `torch.manual_seed(n)` inside.
//!
//! Entering copies the state of the default CPU generator and of every CUDA
//! device's default generator; leaving puts those states back, so the code
//! after the scope draws exactly the numbers it would have drawn had the
//! scope never run. `devices = [..]` limits the CUDA generators forked (and
//! seeded) to those listed, as `fork_rng(devices=[..])` does — PyTorch warns
//! that forking every device is slow on a machine with many GPUs. The
//! generators are **process-wide**: another thread
//! drawing while the scope is open advances the same generators, and its
//! draws are rewound too when the scope ends. So a `seed` or `fork_rng`
//! scope of another thread (or async task) is refused while one is open;
//! within one thread they nest (see
//! [process-wide words](crate#process-wide-words)).

use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::process_wide::{self, Held, Registry};
use crate::sync::lock;
use crate::{Scope, ScopeError, ffi};

unsafe extern "C" {
    fn tch_scope_rng_save(devices: *const i32, n: i32, state: *mut *mut c_void) -> ffi::Status;
    fn tch_scope_rng_restore(state: *const c_void) -> ffi::Status;
    fn tch_scope_rng_free(state: *mut c_void);
    fn tch_scope_rng_seed(seed: u64, devices: *const i32, n: i32) -> ffi::Status;
    fn tch_scope_rng_cuda_count() -> i32;
    fn tch_scope_rng_get_state(device: i32, out: *mut *mut c_void) -> ffi::Status;
    fn tch_scope_rng_set_state(device: i32, state: *const c_void) -> ffi::Status;
}

/// The states of the default generators, CPU first (device `-1`), then
/// every CUDA device's, as `torch.get_rng_state()` and
/// `torch.cuda.get_rng_state(i)` give them: byte tensors a checkpoint
/// saves.
pub(crate) fn generator_states() -> Result<Vec<(i32, tch::Tensor)>, String> {
    (-1..cuda_devices())
        .map(|device| {
            let mut out = std::ptr::null_mut();
            // SAFETY: `out` is writable; on success it holds a new
            // `at::Tensor*` that we own (tch's C_tensor).
            ffi::check(unsafe { tch_scope_rng_get_state(device, &mut out) })?;
            // SAFETY: as above: a fresh tensor handle, owned once.
            Ok((device, unsafe { tch::Tensor::from_ptr(out.cast()) }))
        })
        .collect()
}

/// The number of CUDA devices whose generators [`generator_states`] gives.
pub(crate) fn cuda_devices() -> i32 {
    // SAFETY: no arguments; the shim catches C++ exceptions.
    unsafe { tch_scope_rng_cuda_count() }
}

/// Sets the default generator of `device` (`-1`: the CPU) to `state`, one
/// that [`generator_states`] gave.
pub(crate) fn set_generator_state(device: i32, state: &tch::Tensor) -> Result<(), String> {
    // SAFETY: a live tensor handle for the call; the shim catches C++
    // exceptions (a state of the wrong size, a missing device).
    ffi::check(unsafe { tch_scope_rng_set_state(device, state.as_ptr().cast()) })
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
///
/// `seed(n)` takes any primitive integer of at most 64 bits ([`IntoSeed`]):
/// `seed(step)` with a `usize` or an `i64` step, `seed(-1)`.
#[derive(Debug, Clone, Copy)]
pub struct Seed(pub u64);

impl Seed {
    /// The seed `n`, of any primitive integer type of at most 64 bits, as
    /// `torch.manual_seed(n)` takes it: a negative `n` is its two's
    /// complement (see [`IntoSeed`]).
    ///
    /// ```
    /// use tch_scope::Seed;
    /// assert_eq!(Seed::new(-1).0, u64::MAX); // torch.initial_seed() after manual_seed(-1)
    /// assert_eq!(Seed::new(7usize).0, 7);
    /// ```
    pub fn new(n: impl IntoSeed) -> Self {
        Self(n.into_seed())
    }
}

/// An integer that seeds the generators: every primitive integer type of
/// at most 64 bits (`i8` … `i64`, `isize`, `u8` … `u64`, `usize`) and a
/// reference to one, so `seed(step)` compiles whatever the type of `step`.
///
/// The seed is what `torch.manual_seed(n)` makes of the same number:
/// a non-negative `n` is itself; a negative one is its two's complement as
/// a `u64` (`-1` gives `u64::MAX`, as `torch.manual_seed(-1)` gives
/// `torch.initial_seed() == 2**64 - 1`), so `seed(-1)` draws what
/// `torch.manual_seed(-1)` draws. PyTorch refuses a number outside
/// `[-2**63, 2**64 - 1]`; here `i128` and `u128` are not seeds at all (a
/// compile error): convert with `u64::try_from(n)`. An integer literal
/// in `seed(..)` is read as a `u64` (an `i64` when negated), not as the
/// `i32` an untyped literal would be, so `seed(0xdead_beef)` compiles.
///
/// Sealed: implemented by tch-scope only.
#[diagnostic::on_unimplemented(
    message = "a seed is an integer of at most 64 bits, not `{Self}`",
    label = "`seed` takes an integer: `u64`, `i64`, `usize`, `i32`, …",
    note = "as `torch.manual_seed`, which takes an int in [-2**63, 2**64 - 1]: \
            round a float to an integer yourself; narrow a wider integer with `u64::try_from(n)`"
)]
pub trait IntoSeed: sealed::Sealed {
    /// The seed, as `torch.initial_seed()` reports it after
    /// `torch.manual_seed(self)`.
    fn into_seed(self) -> u64;
}

mod sealed {
    pub trait Sealed {}
}

/// `IntoSeed` for `$t` and `&$t` (an iterator's `&usize`), the seed made
/// by `$seed`. A blanket `&T` would muddle the error for `&str`.
macro_rules! seeds {
    ($($t:ty => $seed:expr),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl IntoSeed for $t {
            fn into_seed(self) -> u64 {
                $seed(self)
            }
        }
        impl sealed::Sealed for &$t {}
        // Errors list the integer types, not their references too.
        #[diagnostic::do_not_recommend]
        impl IntoSeed for &$t {
            fn into_seed(self) -> u64 {
                $seed(*self)
            }
        }
    )*};
}

seeds!(
    u8 => u64::from,
    u16 => u64::from,
    u32 => u64::from,
    u64 => u64::from,
    usize => usize_seed,
    // Negative: two's complement, as `torch.manual_seed`.
    i8 => |n| i64::from(n).cast_unsigned(),
    i16 => |n| i64::from(n).cast_unsigned(),
    i32 => |n| i64::from(n).cast_unsigned(),
    i64 => i64::cast_unsigned,
    isize => isize_seed,
);

// Lossless: `usize` and `isize` have at most 64 bits wherever libtorch runs.
#[allow(clippy::cast_possible_truncation, reason = "at most 64 bits")]
fn usize_seed(n: usize) -> u64 {
    n as u64
}

#[allow(clippy::cast_possible_truncation, reason = "at most 64 bits")]
fn isize_seed(n: isize) -> u64 {
    (n as i64).cast_unsigned()
}

/// Restores the generator states saved on entry. While it is open, a
/// `seed` or `fork_rng` of another thread or task is refused (the default
/// generators are one per device: the draws would interleave); within one
/// thread (or task) they nest. Not `Send`: it is its
/// thread's hold; an async task's scope moves with the task (see
/// [process-wide words](crate#process-wide-words)).
///
/// ```compile_fail
/// fn send<T: Send>(_: T) {}
/// let guard = tch_scope::Scope::enter(&mut tch_scope::Seed(1)).unwrap();
/// send(guard); // a hold moved by hand would still count as this thread's
/// ```
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct RngGuard {
    /// This guard's place in [`OPEN`].
    slot: u64,
    /// `fork_rng` or `seed`, for an exit error.
    scope: &'static str,
    /// Dropped after the state is restored.
    held: Held<Generators>,
}

/// A state saved by the shim: owned by one entry of [`OPEN`] at a time.
struct SavedState(*mut c_void);

// SAFETY: the shim's heap copy of the generators' states, owned by one
// entry at a time; restoring and freeing it from any thread is fine
// (libtorch locks each generator's mutex to set its state).
unsafe impl Send for SavedState {}

impl Drop for SavedState {
    fn drop(&mut self) {
        // SAFETY: from tch_scope_rng_save, freed once, here.
        unsafe { tch_scope_rng_free(self.0) }
    }
}

/// The open `seed` / `fork_rng` scopes, oldest first, each with the state
/// to put back when it ends as the newest: the state before it, or before
/// an older scope that ended first. So scopes may end in any order: the
/// generators go back to the state before the first once all have ended,
/// and each scope that ends last-in-first-out hands its parent's stream
/// back where it was.
static OPEN: Mutex<Vec<(u64, SavedState)>> = Mutex::new(Vec::new());
static NEXT_SLOT: AtomicU64 = AtomicU64::new(1);

/// The default generators: no value is shared between holders.
pub(crate) struct Generators;

static REGISTRY: Registry<Generators> = Registry::new();

impl process_wide::Setting for Generators {
    /// The seed, or `None` for `fork_rng`.
    type Value = Option<u64>;
    type Saved = ();

    fn registry() -> &'static Registry<Self> {
        &REGISTRY
    }

    fn same(_: &Option<u64>, _: &Option<u64>) -> bool {
        false
    }

    fn describe(seed: &Option<u64>) -> String {
        match seed {
            Some(n) => format!("seed({n})"),
            None => "fork_rng".into(),
        }
    }

    // The guard saves and restores the states itself, one copy each.
    fn save() -> Result<(), String> {
        Ok(())
    }

    fn set(_: &Option<u64>) -> Result<(), String> {
        Ok(())
    }

    fn restore((): &()) -> Result<(), String> {
        Ok(())
    }
}

/// Which CUDA generators: all (`None`), or those listed.
type Devices<'a> = Option<&'a [i32]>;

fn raw(devices: Devices<'_>) -> (*const i32, i32) {
    devices.map_or((std::ptr::null(), -1), |d| {
        (d.as_ptr(), i32::try_from(d.len()).unwrap_or(i32::MAX))
    })
}

fn save(
    scope: &'static str,
    seed: Option<u64>,
    devices: Devices<'_>,
) -> Result<RngGuard, ScopeError> {
    let held = Held::enter(seed, scope)?;
    let mut state = std::ptr::null_mut();
    let (list, n) = raw(devices);
    // SAFETY: `n` device indices at `list`; `state` is writable; the shim
    // catches C++ exceptions.
    ffi::check(unsafe { tch_scope_rng_save(list, n, &mut state) })
        .map_err(|e| ScopeError::new(scope, None, e))?;
    let slot = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
    lock(&OPEN).push((slot, SavedState(state)));
    Ok(RngGuard { slot, scope, held })
}

impl Scope for ForkRng {
    type Guard = RngGuard;
    type Error = ScopeError;

    fn enter(&mut self) -> Result<RngGuard, ScopeError> {
        save("fork_rng", None, None)
    }

    fn suspend(guard: &mut RngGuard) {
        guard.held.suspend();
    }

    fn resume(guard: &mut RngGuard) {
        guard.held.resume();
    }
}

impl Scope for Seed {
    type Guard = RngGuard;
    type Error = ScopeError;

    fn enter(&mut self) -> Result<RngGuard, ScopeError> {
        seeded("seed", self.0, None)
    }

    fn suspend(guard: &mut RngGuard) {
        guard.held.suspend();
    }

    fn resume(guard: &mut RngGuard) {
        guard.held.resume();
    }
}

fn seeded(scope: &'static str, n: u64, devices: Devices<'_>) -> Result<RngGuard, ScopeError> {
    let guard = save(scope, Some(n), devices)?;
    let (list, len) = raw(devices);
    // On failure `guard` drops here and restores what was saved.
    // SAFETY: `len` device indices at `list`; the shim catches C++ exceptions.
    ffi::check(unsafe { tch_scope_rng_seed(n, list, len) })
        .map_err(|e| ScopeError::new(scope, None, e))?;
    Ok(guard)
}

impl ForkRng {
    /// `fork_rng(devices=[..])`: the CPU generator and only the listed CUDA
    /// devices' (none for an empty list). A device that is not there is a
    /// [`ScopeError`] on entry.
    ///
    /// ```no_run
    /// use tch_scope::{ForkRng, Scope};
    /// assert!(ForkRng::devices([]).enter().is_ok()); // the CPU generator only
    /// if tch_scope::cuda_device_count() == 0 {
    ///     let e = ForkRng::devices([0]).enter().unwrap_err();
    ///     assert_eq!(e.device(), Some(tch::Device::Cuda(0)));
    /// }
    /// ```
    pub fn devices(devices: impl IntoIterator<Item = usize>) -> ForkDevices {
        ForkDevices::new(None, devices)
    }
}

impl Seed {
    /// `seed(n, devices = [..])`: forks and seeds the CPU generator and only
    /// the listed CUDA devices' (see [`ForkRng::devices`]).
    ///
    /// ```no_run
    /// use tch::{Kind, Tensor};
    /// use tch_scope::{Scope, Seed};
    /// let draw = || Tensor::rand([2], (Kind::Float, tch::Device::Cpu));
    /// let a = { let _g = Seed(3).devices([]).enter().unwrap(); draw() };
    /// let b = { let _g = Seed(3).enter().unwrap(); draw() };
    /// assert!(a.equal(&b));
    /// ```
    pub fn devices(self, devices: impl IntoIterator<Item = usize>) -> ForkDevices {
        ForkDevices::new(Some(self.0), devices)
    }
}

/// `fork_rng` or `seed(n)` over the CPU generator and a chosen list of CUDA
/// devices: made by [`ForkRng::devices`] and [`Seed::devices`].
#[derive(Debug, Clone)]
pub struct ForkDevices {
    seed: Option<u64>,
    /// `i32::MAX` stands for an index that does not fit (never present).
    devices: Vec<i32>,
}

impl ForkDevices {
    fn new(seed: Option<u64>, devices: impl IntoIterator<Item = usize>) -> Self {
        Self {
            seed,
            devices: devices
                .into_iter()
                .map(|d| i32::try_from(d).unwrap_or(i32::MAX))
                .collect(),
        }
    }

    fn error(&self, e: ScopeError) -> ScopeError {
        let list: Vec<String> = self.devices.iter().map(ToString::to_string).collect();
        let list = list.join(", ");
        let scope = match self.seed {
            Some(n) => format!("seed({n}, devices = [{list}])"),
            None => format!("fork_rng(devices = [{list}])"),
        };
        // The device named in libtorch's message, if one was missing.
        let missing = self
            .devices
            .iter()
            .find(|&&d| crate::cuda_device_count() <= usize::try_from(d).unwrap_or(usize::MAX));
        let device = missing.map(|&d| tch::Device::Cuda(usize::try_from(d).unwrap_or(0)));
        ScopeError::new(scope, device, e.reason().to_owned())
    }
}

impl Scope for ForkDevices {
    type Guard = RngGuard;
    type Error = ScopeError;

    /// # Errors
    /// A listed CUDA device is not present, or libtorch refused a
    /// generator's state.
    fn enter(&mut self) -> Result<RngGuard, ScopeError> {
        let devices = Some(&self.devices[..]);
        match self.seed {
            Some(n) => seeded("seed", n, devices),
            None => save("fork_rng", None, devices),
        }
        .map_err(|e| self.error(e))
    }

    fn suspend(guard: &mut RngGuard) {
        guard.held.suspend();
    }

    fn resume(guard: &mut RngGuard) {
        guard.held.resume();
    }
}

impl Drop for RngGuard {
    fn drop(&mut self) {
        let mut open = lock(&OPEN);
        let Some(i) = open.iter().position(|(slot, _)| *slot == self.slot) else {
            return;
        };
        let (_, mine) = open.remove(i);
        if let Some((_, above)) = open.get_mut(i) {
            // Not the newest: the scope above puts back, when it ends, what
            // was there before this one (its own saved state goes).
            *above = mine;
            return;
        }
        // The newest: the generators go back to the state before it, under
        // the lock, so a scope entered meanwhile cannot save a stale state.
        // SAFETY: a live state from tch_scope_rng_save.
        let restored = ffi::check(unsafe { tch_scope_rng_restore(mine.0) });
        // The exit hook may run any code, a `seed` scope too: not under it.
        drop(open);
        drop(mine);
        if let Err(e) = restored {
            crate::exit::report(
                self.scope,
                format_args!("could not restore the RNG state: {e}"),
            );
        }
    }
}

// SAFETY: its thread-bound part is its registry entry, which `Spanned`
// steps off and onto threads around each poll (`suspend` / `resume`); the
// rest is plain data.
unsafe impl crate::process_wide::MovesWithTask for RngGuard {}
