//! `profile("trace.json")` and `record("name")`: `torch.profiler.profile`
//! writing a Chrome trace, and `torch.profiler.record_function`.
//!
//! `profile` runs libtorch's Kineto profiler — what `torch.profiler` drives
//! — for this thread (CPU activities, plus CUDA kernels when a GPU is
//! present) and writes the trace on exit, atomically: to a temporary file
//! in the same folder, renamed over the destination, so a trace is never
//! half-written. Open it in Perfetto (<https://ui.perfetto.dev>) or
//! `chrome://tracing`. Kineto keeps one session per process: a `profile`
//! entered while another is open (on any thread) fails to enter with a
//! [`ScopeError`] rather than cancelling the running one.
//!
//! `record` marks a named range, an `at::RecordFunction` of the user scope
//! (`RECORD_USER_SCOPE`): it shows up in the trace of an enclosing
//! `profile`, and costs next to nothing without one. With a CUDA libtorch
//! it also pushes an NVTX range (for Nsight Systems), through libtorch's
//! profiler stubs, so no CUDA header is needed.

use std::convert::Infallible;
use std::ffi::{CString, c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::trace::{self, Kind, SpanRecord};
use crate::{Scope, ScopeError, clock, durable, ffi};

unsafe extern "C" {
    fn tch_scope_profile_start(cuda: bool, memory: bool) -> ffi::Status;
    fn tch_scope_profile_stop(path: *const c_char) -> ffi::Status;
    fn tch_scope_record_begin(name: *const c_char, range: *mut *mut c_void) -> ffi::Status;
    fn tch_scope_record_end(range: *mut c_void);
}

/// Whether a `profile` scope is open in this process: preparing a second
/// Kineto session would cancel the first and leave it with no trace.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Profiles the scope into a Chrome/Perfetto trace at `path`.
///
/// ```
/// use tch::{Device, Kind, Tensor};
/// use tch_scope::{Profile, Scope};
/// let path = std::env::temp_dir().join(format!("doc-trace-{}.json", std::process::id()));
/// let guard = Profile::new(&path).enter().unwrap();
/// let a = Tensor::ones([8, 8], (Kind::Float, Device::Cpu));
/// let _ = a.matmul(&a);
/// drop(guard); // writes the trace
/// let trace = std::fs::read_to_string(&path).unwrap();
/// assert!(trace.contains("aten::matmul"));
/// # std::fs::remove_file(&path).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Profile {
    path: PathBuf,
    memory: bool,
}

impl Profile {
    /// A profile written to `path` when the scope ends.
    pub fn new(path: impl AsRef<Path>) -> Self {
        Self {
            path: path.as_ref().to_path_buf(),
            memory: false,
        }
    }

    /// Records tensor allocations and frees too (`profile_memory=True`):
    /// `[memory]` events in the trace. Inside a
    /// [`tensor_memory`](crate::TensorMemory) scope of the same thread the
    /// profile records them whatever this says, as that scope counts them
    /// through the profile while it runs.
    ///
    /// ```no_run
    /// use tch::{Device, Kind, Tensor};
    /// use tch_scope::{Profile, Scope};
    /// let path = std::env::temp_dir().join(format!("doc-mem-{}.json", std::process::id()));
    /// let guard = Profile::new(&path).memory(true).enter().unwrap();
    /// drop(Tensor::ones([256, 256], (Kind::Float, Device::Cpu)));
    /// drop(guard);
    /// assert!(std::fs::read_to_string(&path).unwrap().contains("[memory]"));
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn memory(mut self, on: bool) -> Self {
        self.memory = on;
        self
    }
}

/// Stops the profiler and writes the trace. A failure to write reaches the
/// caller on the success path of [`try_scoped!`](crate::try_scoped) (its
/// `Err`) and of [`scoped!`](crate::scoped) (a panic), and the exit hook
/// ([`set_exit_hook`](crate::set_exit_hook)) otherwise.
///
/// `!Send` ([`PhantomNotSend`](crate::PhantomNotSend)): Kineto profiles the
/// thread that started it (its callbacks are that thread's), so the
/// profiler must be stopped there — and in async code a task that moves
/// between worker threads would profile whichever ran it. An attributed
/// `async fn` with `profile` is therefore not `Send`: profile a sync
/// function, or run the future on a current-thread runtime.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct ProfileGuard {
    path: PathBuf,
    _not_send: crate::PhantomNotSend,
}

impl Scope for Profile {
    type Guard = ProfileGuard;
    type Error = ScopeError;

    fn enter(&mut self) -> Result<ProfileGuard, ScopeError> {
        let fail = |e: String| ScopeError::new(format!("profile({:?})", self.path), None, e);
        // The trace path is checked now, not after a long run.
        CString::new(
            durable::temp_path(&self.path)
                .as_os_str()
                .as_encoded_bytes(),
        )
        .map_err(|_| fail("the path contains a NUL byte".into()))?;
        durable::check_writable(&self.path)
            .map_err(|e| fail(format!("{} can't be written: {e}", self.path.display())))?;
        if ACTIVE.swap(true, Ordering::AcqRel) {
            return Err(fail(
                "a profile scope is already open (libtorch profiles one session per process)"
                    .into(),
            ));
        }
        let cuda = crate::cuda_device_count() > 0;
        // SAFETY: plain value; exceptions caught by the shim.
        if let Err(e) = ffi::check(unsafe { tch_scope_profile_start(cuda, self.memory) }) {
            ACTIVE.store(false, Ordering::Release);
            return Err(fail(e));
        }
        Ok(ProfileGuard {
            path: self.path.clone(),
            _not_send: crate::PhantomNotSend::NEW,
        })
    }
}

impl Drop for ProfileGuard {
    fn drop(&mut self) {
        let written = durable::replace(&self.path, |tmp| {
            let tmp = CString::new(tmp.as_os_str().as_encoded_bytes())
                .map_err(|_| "the path contains a NUL byte".to_owned())?;
            // SAFETY: a NUL-terminated path; same thread as entry (!Send).
            ffi::check(unsafe { tch_scope_profile_stop(tmp.as_ptr()) })
        });
        ACTIVE.store(false, Ordering::Release);
        if let Err(e) = written {
            crate::exit::report(
                "profile",
                format_args!("could not write the profile {}: {e}", self.path.display()),
            );
        }
    }
}

/// A named range (`torch.profiler.record_function(name)`).
///
/// ```no_run
/// use tch_scope::{Record, Scope};
/// let range = Record::new("data loading").enter().unwrap();
/// drop(range);
/// ```
#[derive(Debug, Clone)]
pub struct Record {
    /// The name as libtorch gets it, made once: a NUL byte shows as `\0`.
    name: CString,
}

impl Record {
    /// A range named `name`.
    pub fn new(name: impl AsRef<str>) -> Self {
        let name = name.as_ref();
        // One allocation, sized for the NUL; a NUL inside is shown as `\0`.
        let name = CString::new(name)
            .or_else(|_| CString::new(name.replace('\0', "\\0")))
            .unwrap_or_default();
        Self { name }
    }
}

/// Ends the range.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct RecordGuard {
    range: *mut c_void,
    /// The name and the clock at entry, while the trace records.
    span: Option<(&'static &'static str, u64)>,
    #[cfg(feature = "tracing")]
    _tracing: tracing::span::EnteredSpan,
}

impl Scope for Record {
    type Guard = RecordGuard;
    type Error = Infallible;

    /// Never fails: a NUL byte in the name is shown as `\0`, and a range
    /// libtorch refuses goes to the exit hook (the body runs unmarked).
    fn enter(&mut self) -> Result<RecordGuard, Infallible> {
        let name = &self.name;
        let mut range = std::ptr::null_mut();
        // SAFETY: a NUL-terminated name the shim copies; writable out-param.
        if let Err(e) = ffi::check(unsafe { tch_scope_record_begin(name.as_ptr(), &mut range) }) {
            crate::exit::report(format!("record({:?})", self.name.to_string_lossy()), e);
            range = std::ptr::null_mut();
        }
        let span =
            trace::recording().then(|| (trace::intern(&name.to_string_lossy()), clock::now()));
        Ok(RecordGuard {
            range,
            span,
            #[cfg(feature = "tracing")]
            _tracing: tracing::info_span!(
                target: "tch_scope",
                "record",
                name = %name.to_string_lossy()
            )
            .entered(),
        })
    }
}

impl Drop for RecordGuard {
    fn drop(&mut self) {
        if let Some((name, start)) = self.span {
            trace::push(&SpanRecord {
                kind: Kind::Record,
                name,
                start,
                end: clock::now(),
                outcome: crate::report::Outcome::at_exit_or(crate::report::Outcome::Completed),
                bytes: [0; 4],
            });
        }
        if self.range.is_null() {
            return;
        }
        // SAFETY: from tch_scope_record_begin, ended once, on this thread
        // (the raw pointer makes the guard !Send).
        unsafe { tch_scope_record_end(self.range) };
    }
}
