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
//! Every failure is a [`ScopeError`] saying what is wrong, never an abort:
//! a missing file, a file that is not a package (or has no model of the
//! name asked), a package compiled for a device this process has none of
//! (`AOTI_DEVICE_KEY` in its metadata), the wrong number of inputs, and an
//! input of the wrong shape, stride or dtype or on the wrong device.
//!
//! The last four are checked by the package's own generated code, which
//! does so only when the environment variable `AOTI_RUNTIME_CHECK_INPUTS`
//! is set when the package first runs; without the checks it trusts its
//! inputs, and a wrong shape reads out of bounds. So the first
//! [`load`](Package::load) of the process sets `AOTI_RUNTIME_CHECK_INPUTS=1`
//! unless the environment already has it (set it to `0` before to turn the
//! checks off: a few comparisons per input and run). Inputs must have the
//! strides they were exported with (contiguous, usually): pass
//! `x.contiguous()` for a transposed view. The input count is checked
//! here, always. A package does not record the torch version it was built
//! with; it calls libtorch through its C shims (`aoti_torch_*`), and a
//! library missing one of them fails to load with the symbol named.
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
use std::ffi::{CStr, CString, c_char, c_void};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Mutex, Once, PoisonError};

use tch::Tensor;

use crate::{ScopeError, ffi};

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
    /// A [`ScopeError`] naming the path and what is wrong: no such file,
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
    /// # Errors
    /// A [`ScopeError`] if the input count is not the package's, an input
    /// does not match what the package was exported for (shape, stride,
    /// dtype, device: see the [module docs](self)), the package's code
    /// fails, or an open `deadline` has passed (its message, as for any
    /// operator).
    pub fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, ScopeError> {
        if inputs.len() != self.inputs {
            return Err(self.run_error(format!(
                "the package takes {} input tensor{}, got {}",
                self.inputs,
                if self.inputs == 1 { "" } else { "s" },
                inputs.len()
            )));
        }
        let ptrs: Vec<*mut c_void> = inputs
            .iter()
            .map(|t| t.as_ptr().cast_mut().cast::<c_void>())
            .collect();
        let mut outs: Vec<*mut c_void> = vec![std::ptr::null_mut(); self.outputs];
        let mark = crate::scopes::deadline::trips();
        // SAFETY: `raw` is live; `ptrs` holds `inputs.len()` live tensors
        // (only read); `outs` has room for the package's output count.
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
        Ok(outs
            .into_iter()
            // SAFETY: each is a new `at::Tensor*` the shim made for us, as
            // tch's own functions return them; tch frees it on drop.
            .map(|p| unsafe { Tensor::from_ptr(p.cast()) })
            .collect())
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

    fn run_error(&self, reason: String) -> ScopeError {
        ScopeError::new(
            "aoti::Package::run",
            None,
            format!("{}: {reason}", self.path.display()),
        )
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

impl PackageOptions {
    /// How many runs may proceed at once (libtorch's `num_runners`: model
    /// instances sharing the weights); further callers wait. Default: the
    /// number of CPUs this process may use. `0` is taken as 1.
    pub fn runners(mut self, n: usize) -> Self {
        self.runners = Some(n.max(1));
        self
    }

    /// The model's name inside the package (`"model"`, PyTorch's default;
    /// a package may hold several).
    pub fn model_name(mut self, name: impl Into<String>) -> Self {
        self.model_name = name.into();
        self
    }

    /// Loads the package at `path` (a `.pt2` file, or a folder an unpacked
    /// one was extracted to).
    ///
    /// # Errors
    /// As [`Package::load`].
    pub fn load(self, path: impl AsRef<Path>) -> Result<Package, ScopeError> {
        let path = path.as_ref().to_path_buf();
        let fail = |reason: String| {
            ScopeError::new(
                "aoti::Package::load",
                None,
                format!("{}: {reason}", path.display()),
            )
        };
        match std::fs::metadata(&path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(fail("no such file".into()));
            }
            Err(e) => return Err(fail(e.to_string())),
        }
        let c_path = path_cstring(&path).ok_or_else(|| fail("the path has a NUL byte".into()))?;
        let c_name = CString::new(self.model_name.as_str())
            .map_err(|_| fail("the model name has a NUL byte".into()))?;
        let runners = self.runners.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        });

        let _lock = LOADER.lock().unwrap_or_else(PoisonError::into_inner);
        enable_input_checks();
        let mut raw = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings and a writable out-param; one load
        // at a time (LOADER).
        let status =
            unsafe { tch_scope_aoti_load(c_path.as_ptr(), c_name.as_ptr(), runners, &mut raw) };
        ffi::check(status).map_err(|e| fail(describe_load_error(&e, &self.model_name)))?;
        let raw = NonNull::new(raw).ok_or_else(|| fail("the loader returned nothing".into()))?;
        // SAFETY: `raw` is live; the metadata string lives as long as it.
        let (inputs, outputs, meta) = unsafe {
            (
                tch_scope_aoti_num_inputs(raw.as_ptr()),
                tch_scope_aoti_num_outputs(raw.as_ptr()),
                CStr::from_ptr(tch_scope_aoti_metadata(raw.as_ptr()))
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        let metadata = meta
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Ok(Package {
            raw,
            path,
            runners,
            inputs,
            outputs,
            metadata,
        })
    }
}

fn path_cstring(path: &Path) -> Option<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes()).ok()
}

/// Sets `AOTI_RUNTIME_CHECK_INPUTS=1` once, unless the environment has it.
/// Called under LOADER, before any package of this process has run.
fn enable_input_checks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os(CHECK_INPUTS).is_none() {
            // SAFETY: once per process, at the first load (before any
            // package reads it). Rust's own readers take std's environment
            // lock; a C library reading the environment on another thread
            // at this very moment is the remaining hazard, as for any
            // `setenv`.
            unsafe { std::env::set_var(CHECK_INPUTS, "1") };
        }
    });
}

/// The loader's message, shortened where it is long and made plain where
/// it is cryptic.
fn describe_load_error(msg: &str, model_name: &str) -> String {
    if msg.starts_with("Failed to initialize zip archive") {
        return format!("not an AOTInductor package (not a zip archive: {msg})");
    }
    // libtorch 2.13 says the first, 2.11 the second.
    if msg.starts_with("Failed to find wrapper metadata")
        || msg.starts_with("Failed to find a generated cpp file or so file for model")
    {
        // The loader goes on to list every file of the archive.
        return format!(
            "not an AOTInductor package, or none with a model named {model_name:?} \
             (no data/aotinductor/{model_name}/*_metadata.json in it)"
        );
    }
    msg.lines().next().unwrap_or(msg).to_owned()
}

/// The package's own check names `input_handles[i]`; add what input `i`
/// is, with dtypes by name (the check gives ScalarType numbers).
fn describe_input_error(msg: &str, inputs: &[&Tensor]) -> String {
    let msg = msg.trim_end();
    if msg.contains("API call failed") {
        // libtorch 2.11's runner: its check printed the reason on stderr
        // and returned only this.
        let given: Vec<String> = inputs.iter().map(|t| describe_tensor(t)).collect();
        return format!(
            "the package refused its inputs ({}); this libtorch's runner gives no reason \
             (its check prints one on stderr): compare each input's shape, dtype and \
             strides with the package's",
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
        None => msg.to_owned(),
    }
}

/// `a Float tensor of shape [5, 32], strides [32, 1], on Cpu`.
fn describe_tensor(t: &Tensor) -> String {
    format!(
        "a {} tensor of shape {:?}, strides {:?}, on {:?}",
        t.f_kind()
            .map_or_else(|_| "?".to_owned(), |k| format!("{k:?}")),
        t.size(),
        t.stride(),
        t.device()
    )
}
