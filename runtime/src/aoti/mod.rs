//! AOTInductor packages (`.pt2`): the models PyTorch exports for C++ now
//! that TorchScript is deprecated, loaded and run on tch's libtorch.
//!
//! Export in Python, run in Rust:
//!
//! ```python
//! ep = torch.export.export(model.eval(), (x,))
//! torch._inductor.aoti_compile_and_package(ep, package_path="model.pt2")
//! ```
//!
//! ```no_run
//! use std::sync::Arc;
//! use tch::{Device, Kind, Tensor};
//! use tch_scope::{Inference, aoti::Package};
//!
//! let pkg = Package::load("model.pt2")?;
//! let x = Tensor::randn([4, 32], (Kind::Float, Device::Cpu));
//! let out: Vec<Tensor> = pkg.run(&[&x])?;
//!
//! // Served to many threads: a package has no train/eval mode, it is
//! // served as it is, each call under `inference_mode`.
//! let served = Arc::new(Inference::new(pkg)?);
//! let y = served.run(|m| m.run(&[&x]))?;
//! # Ok::<(), tch_scope::ScopeError>(())
//! ```
//!
//! A [`Package`] wraps libtorch's `torch::inductor::AOTIModelPackageLoader`
//! (in `libtorch_cpu`), whose outputs are bitwise those of Python's
//! `torch._inductor.aoti_load_package(path)(x)` on the same package and
//! input (tests/aoti.rs checks it).
//!
//! # Bad input
//! Every failure is a [`ScopeError`] that says "cannot load" or "cannot
//! run" ([`Stage::Load`](crate::Stage::Load), [`Stage::Run`](crate::Stage::Run)),
//! naming the package's path, its device and what is wrong, never an
//! abort: a missing file, a file that is not a package (or has no model of
//! the name asked), a package compiled for a device this process has none
//! of (`AOTI_DEVICE_KEY` in its metadata), and an input the package was not
//! compiled for.
//!
//! [`Package::run`] checks every input itself before the package sees it:
//! the count, then each input's rank, dtype (named as tch names them:
//! "input 0 does not match the package: a Double tensor (torch.float64),
//! the package takes Float (torch.float32): Float [4, 32]"), device, the size of each dim (a fixed size, or the
//! range of a dynamic one) and each stride that does not depend on a
//! dynamic size. What each input must be is read at load from the
//! package's own generated input check (the `check_input_<i>` functions of
//! the wrapper source it ships; [`Package::input_specs`]), so the package's
//! checker is never the one that refuses. A package whose source has no
//! such check has its rank, dtype and device learned from its first run
//! that succeeds, and its own check does the rest.
//!
//! A stride mismatch says how to fix it ("pass `x.contiguous()`" when the
//! package takes a contiguous tensor); it is not fixed behind the caller's
//! back, as that would copy the input on every run. The one exception: a
//! dim of size 1 is never stepped over, so its stride carries no meaning,
//! and an input that differs only there (which `.contiguous()` leaves as
//! it is) is run as a view with the package's strides, without a copy.
//!
//! The package's own check runs too where `AOTI_RUNTIME_CHECK_INPUTS` is
//! set when the package first runs (without it the package trusts its
//! inputs and a wrong shape reads out of bounds): the first
//! [`load`](Package::load) of the process sets it to `1` unless the
//! environment already has it. It is a second line behind the checks
//! above.
//!
//! # The package's stderr
//! A package's runtime prints every failed run to `std::cerr` ("Error: …",
//! and a C++ backtrace for an error of libtorch's, such as an embedding
//! index out of range): a served package's clients could fill the
//! server's log. The first load installs a filter on `std::cerr` that
//! takes what a thread writes there while it is inside a run: a failed
//! run's error line becomes the [`ScopeError`]'s reason (without the
//! backtrace) and nothing of it reaches stderr; anything else written
//! during a run is passed on to stderr after it. Writes of other threads,
//! and outside runs, pass through unchanged.
//!
//! A package does not record the torch version it was built with; it
//! calls libtorch through its C shims (`aoti_torch_*`), and a library
//! missing one of them fails to load with the symbol named.
//!
//! # Threads
//! A package holds a number of *runners* (model instances, libtorch's
//! `num_runners`): that many runs proceed at once, and further callers wait
//! for a free one. The default is the number of CPUs this process may use
//! ([`std::thread::available_parallelism`]); set it with
//! [`Package::options`]`().runners(n)`. One runner serializes every
//! caller. Loading (and dropping) runs under a process-wide lock:
//! libtorch's loader is not safe to construct from two threads at once.
//!
//! # Scopes inside a run
//! Settled by tests on CPU (tests/aoti.rs); docs/words.md has the table.
//! - `deadline`: every run enters the operator `tch_scope::aoti_run` first,
//!   so a deadline that has passed refuses the run before it starts
//!   ("deadline of 5 ms exceeded after 6 ms at tch_scope::aoti_run"), and
//!   the `deadline` scope ends with its error as for any operator; each
//!   run of a loop is checked so. A deadline that passes *during* a CPU
//!   run does not stop it: the package's code reaches no dispatcher (its
//!   buffers come from `at::detail::empty_strided_cpu`, its extern kernels
//!   are `at::cpu::*_out`, its fused loops plain C++), so the run goes to
//!   its end and the next operator is refused. A run waiting for a free
//!   runner waits past the deadline too.
//! - `tensor_memory`: a run's buffers come from libtorch's CPU allocator
//!   on the calling thread and are counted (the outputs, and the
//!   intermediates freed within the run).
//! - `threads(n)`: the package's fused loops are OpenMP regions of
//!   libtorch's own OpenMP, which follow the calling thread's
//!   `threads(n)`, unless the export fixed a count (Inductor writes
//!   `num_threads(N)` when `torch._inductor.config.cpp.threads` is set).
//! - `inference_mode`, `no_grad`: a package records no autograd graph, so
//!   its outputs never require grad, with or without `no_grad`; under
//!   `inference_mode` they are inference tensors.
//! - `timed`: measures the run (CPU work is synchronous).
//!
//! # Devices
//! Only CPU packages are built and tested here: compiling a CUDA package
//! needs a GPU machine's toolchain. A package's device is read from its
//! metadata ([`Package::device_key`]).

use std::collections::BTreeMap;
use std::ffi::{CStr, c_char, c_void};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Mutex, OnceLock, PoisonError};

use tch::{Device, Tensor};

use crate::{ScopeError, ffi};

mod inputs;
mod load;
#[cfg(test)]
mod tests;

pub use inputs::{InputDim, InputSpec};

#[repr(C)]
struct RawPackage {
    _private: [u8; 0],
}

unsafe extern "C" {
    fn tch_scope_aoti_load(
        path: *const c_char,
        model_name: *const c_char,
        num_runners: usize,
        out: *mut *mut RawPackage,
    ) -> ffi::Status;
    fn tch_scope_aoti_free(pkg: *mut RawPackage);
    fn tch_scope_aoti_num_inputs(pkg: *const RawPackage) -> usize;
    fn tch_scope_aoti_num_outputs(pkg: *const RawPackage) -> usize;
    fn tch_scope_aoti_metadata(pkg: *const RawPackage) -> *const c_char;
    fn tch_scope_aoti_input_checks(pkg: *const RawPackage) -> *const c_char;
    fn tch_scope_aoti_run(
        pkg: *mut RawPackage,
        inputs: *const *mut c_void,
        n_inputs: usize,
        outputs: *mut *mut c_void,
    ) -> ffi::Status;
    // deadline.cpp: the message of this thread's last refused operator.
    fn tch_scope_deadline_trip_message() -> *const c_char;
}

/// Construction and destruction of libtorch's loader, one at a time in the
/// process (concurrent construction is unsafe: it extracts, dlopens and
/// registers).
static LOADER: Mutex<()> = Mutex::new(());

/// The variable that turns on the packages' own input checks.
const CHECK_INPUTS: &str = "AOTI_RUNTIME_CHECK_INPUTS";

/// An AOTInductor package loaded for running: see the [module docs](self).
///
/// `Send + Sync`: [`run`](Package::run) may be called from many threads at
/// once (as many run together as the package has runners).
pub struct Package {
    raw: NonNull<RawPackage>,
    path: PathBuf,
    runners: usize,
    inputs: usize,
    outputs: usize,
    metadata: BTreeMap<String, String>,
    /// Read from the package's input check at load, or learned from its
    /// first run that succeeded.
    specs: OnceLock<Vec<InputSpec>>,
}

// SAFETY: libtorch's loader runs under its container's own locks (a pool
// of runner instances, a shared lock for the constants); what is read
// without them (counts, metadata) was copied at load and never changes;
// construction and destruction take LOADER.
unsafe impl Send for Package {}
// SAFETY: as above: `run` takes `&self` and is safe from many threads.
unsafe impl Sync for Package {}

/// How to load a [`Package`]: `Package::options().runners(2).load(path)`.
#[derive(Debug, Clone)]
pub struct PackageOptions {
    runners: Option<usize>,
    model_name: String,
}

impl Package {
    /// Loads the package at `path` with the default options (see
    /// [`PackageOptions`]).
    ///
    /// # Errors
    /// A [`ScopeError`] of [`Stage::Load`](crate::Stage::Load) ("cannot
    /// load `path`: …") naming the path and what is wrong: no such file,
    /// not an AOTInductor package, compiled for a device this process has
    /// none of, or a model library that cannot be loaded.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ScopeError> {
        Self::options().load(path)
    }

    /// Options for [`PackageOptions::load`]: the number of runners and the
    /// model's name in the package.
    ///
    /// ```no_run
    /// let opts = tch_scope::aoti::Package::options().runners(1);
    /// # let _ = opts;
    /// ```
    pub fn options() -> PackageOptions {
        PackageOptions {
            runners: None,
            model_name: "model".to_owned(),
        }
    }

    /// Runs the package on `inputs` (in the order of the exported
    /// function's tensor arguments), returning its outputs.
    ///
    /// Every input is checked against what the package was compiled for
    /// ([`input_specs`](Package::input_specs)) before the package sees it;
    /// a refused input reaches no code of the package and writes nothing to
    /// stderr.
    ///
    /// # Errors
    /// A [`ScopeError`] of [`Stage::Run`](crate::Stage::Run) ("cannot run
    /// `path` on cpu: …") naming the package's path and device, and the
    /// reason: the input count is not the package's, an
    /// input's rank, dtype, device, size or strides are not what the
    /// package takes (see the [module docs](self)), the package's code
    /// fails (its own message, without a backtrace), or an open `deadline`
    /// has passed (its message, as for any operator).
    pub fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, ScopeError> {
        if inputs.len() != self.inputs {
            return Err(self.run_error(format!(
                "the package takes {} input tensor{}, got {}",
                self.inputs,
                if self.inputs == 1 { "" } else { "s" },
                inputs.len()
            )));
        }
        // Inputs differing only in the stride of a dim of size 1 run as a
        // view with the package's strides.
        let mut views: Vec<Option<Tensor>> = Vec::new();
        if let Some(specs) = self.specs.get() {
            for (i, (spec, t)) in specs.iter().zip(inputs).enumerate() {
                let view = inputs::check(i, spec, t).map_err(|r| self.run_error(r))?;
                if view.is_some() {
                    views.resize_with(inputs.len(), || None);
                    views[i] = view;
                }
            }
        }
        let ptrs: Vec<*mut c_void> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let t = views.get(i).and_then(Option::as_ref).unwrap_or(t);
                t.as_ptr().cast_mut().cast::<c_void>()
            })
            .collect();
        let mut outs: Vec<*mut c_void> = vec![std::ptr::null_mut(); self.outputs];
        let mark = crate::scopes::deadline::trips();
        // SAFETY: `raw` is live; `ptrs` holds `inputs.len()` live tensors
        // (only read; `views` outlives the call); `outs` has room for the
        // package's output count.
        let status = unsafe {
            tch_scope_aoti_run(
                self.raw.as_ptr(),
                ptrs.as_ptr(),
                ptrs.len(),
                outs.as_mut_ptr(),
            )
        };
        if let Err(msg) = ffi::check(status) {
            if crate::scopes::deadline::trips() != mark {
                // SAFETY: a NUL-terminated thread-local string, copied at once.
                let trip = unsafe { CStr::from_ptr(tch_scope_deadline_trip_message()) };
                return Err(ScopeError::ended(
                    "aoti::Package::run",
                    None,
                    trip.to_string_lossy().into_owned(),
                ));
            }
            return Err(self.run_error(describe_input_error(&msg, inputs)));
        }
        self.specs.get_or_init(|| inputs::learned(inputs));
        Ok(outs
            .into_iter()
            // SAFETY: each is a new `at::Tensor*` the shim made for us, as
            // tch's own functions return them; tch frees it on drop.
            .map(|p| unsafe { Tensor::from_ptr(p.cast()) })
            .collect())
    }

    /// What each input must be, one per input: read at load from the
    /// package's own generated input check, or, for a package whose source
    /// has none, learned from its first run that succeeded (`None` until
    /// then). [`run`](Package::run) checks every input against these.
    ///
    /// ```no_run
    /// let pkg = tch_scope::aoti::Package::load("model.pt2")?;
    /// if let Some(specs) = pkg.input_specs() {
    ///     println!("{}", specs[0]); // Float [1..=4096, 32]
    /// }
    /// # Ok::<(), tch_scope::ScopeError>(())
    /// ```
    pub fn input_specs(&self) -> Option<&[InputSpec]> {
        self.specs.get().map(Vec::as_slice)
    }

    /// The path it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many runs may proceed at once (see [`PackageOptions::runners`]).
    pub fn runners(&self) -> usize {
        self.runners
    }

    /// The number of tensors [`run`](Package::run) takes.
    pub fn num_inputs(&self) -> usize {
        self.inputs
    }

    /// The number of tensors [`run`](Package::run) returns.
    pub fn num_outputs(&self) -> usize {
        self.outputs
    }

    /// The package's metadata (`AOTI_DEVICE_KEY`, `AOTI_CPU_ISA`, …, and
    /// what the export put in `aot_inductor.metadata`).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The device it was compiled for: `"cpu"`, `"cuda"`, … (its
    /// `AOTI_DEVICE_KEY`; `"cpu"` if the metadata has none).
    pub fn device_key(&self) -> &str {
        self.metadata
            .get("AOTI_DEVICE_KEY")
            .map_or("cpu", String::as_str)
    }

    /// The device its errors name: CPU for a CPU package; none for
    /// another (its index is the loader's choice).
    fn device(&self) -> Option<Device> {
        (self.device_key() == "cpu").then_some(Device::Cpu)
    }

    fn run_error(&self, reason: String) -> ScopeError {
        ScopeError::run(self.path.display().to_string(), self.device(), reason)
    }
}

impl std::fmt::Debug for Package {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Package")
            .field("path", &self.path)
            .field("runners", &self.runners)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("device", &self.device_key())
            .finish_non_exhaustive()
    }
}

impl Drop for Package {
    fn drop(&mut self) {
        let _lock = LOADER.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: made by tch_scope_aoti_load, freed once, here.
        unsafe { tch_scope_aoti_free(self.raw.as_ptr()) }
    }
}

/// The package's own message (what its check or code said), shortened to
/// its first line where it goes on, with what input `i` is where it names
/// `input_handles[i]`.
fn describe_input_error(msg: &str, inputs: &[&Tensor]) -> String {
    let msg = msg.trim_end();
    if msg.contains("API call failed") {
        // A runner that gives no reason, and a package that printed none.
        let given: Vec<String> = inputs.iter().map(|t| describe_tensor(t)).collect();
        return format!(
            "the package refused its inputs ({}) and gave no reason",
            given.join(", ")
        );
    }
    let index = msg
        .strip_prefix("input_handles[")
        .and_then(|rest| rest.split_once(']'))
        .and_then(|(i, _)| i.parse::<usize>().ok());
    match index.and_then(|i| Some((i, inputs.get(i)?))) {
        Some((i, t)) => format!(
            "input {i} ({}) does not match the package: {msg}",
            describe_tensor(t)
        ),
        None => format!("the package's code failed: {msg}"),
    }
}

/// `a Float tensor of shape [5, 32], strides [32, 1], on cpu`.
fn describe_tensor(t: &Tensor) -> String {
    format!(
        "a {} tensor of shape {:?}, strides {:?}, on {}",
        t.f_kind()
            .map_or_else(|_| "?".to_owned(), |k| format!("{k:?}")),
        t.size(),
        t.stride(),
        crate::error::DeviceName(t.device())
    )
}
