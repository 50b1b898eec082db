//! Loading a package: [`PackageOptions::load`], under the process-wide
//! load lock, and what its errors say.

use std::ffi::{CStr, CString};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Once, OnceLock, PoisonError};

use super::{
    CHECK_INPUTS, LOADER, Package, PackageOptions, inputs, tch_scope_aoti_input_checks,
    tch_scope_aoti_load, tch_scope_aoti_metadata, tch_scope_aoti_num_inputs,
    tch_scope_aoti_num_outputs,
};
use crate::{ScopeError, ffi};

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
        let fail = |reason: String| ScopeError::load(path.display().to_string(), None, reason);
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
        // SAFETY: `raw` is live; the strings live as long as it.
        let (inputs, outputs, meta, checks) = unsafe {
            (
                tch_scope_aoti_num_inputs(raw.as_ptr()),
                tch_scope_aoti_num_outputs(raw.as_ptr()),
                CStr::from_ptr(tch_scope_aoti_metadata(raw.as_ptr()))
                    .to_string_lossy()
                    .into_owned(),
                CStr::from_ptr(tch_scope_aoti_input_checks(raw.as_ptr()))
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        let specs = OnceLock::new();
        if let Some(parsed) = inputs::parse(&checks, inputs) {
            let _ = specs.set(parsed);
        }
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
            specs,
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
