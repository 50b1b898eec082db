//! What every binding to the C++ shim shares (`csrc/common.h`): the status
//! type, its error message, the test-only fault switch, and the CUDA link
//! anchor. Each area's own `extern "C"` block sits beside its Rust wrapper
//! (its contract in the area's header, all of them under `csrc/shim.h`).
//! Every shim function that can fail returns a [`Status`]; every struct
//! mirrored on both sides has its layout asserted on both sides.

use std::ffi::CStr;

/// The shim's `tch_scope_status`: 0 = ok, else the message is in
/// `tch_scope_last_error`. Read it only through [`check`].
#[repr(transparent)]
#[must_use = "a shim status says whether the call failed: pass it to ffi::check"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Status(i32);

unsafe extern "C" {
    fn tch_scope_last_error() -> *const std::ffi::c_char;
    pub(crate) fn tch_scope_built_with_cuda() -> i32;
    fn tch_scope_fault_inject(op: *const std::ffi::c_char, times: i32);
}

/// Keeps the shim's `cuda_link.cpp` object in every binary that links this
/// crate, so its reference to libtorch_cuda survives `--as-needed`.
#[used]
static CUDA_LINK: unsafe extern "C" fn() -> i32 = tch_scope_built_with_cuda;

/// Turns a shim status into `Err(message)`.
#[inline]
pub(crate) fn check(status: Status) -> Result<(), String> {
    if status.0 == 0 {
        return Ok(());
    }
    Err(last_error())
}

/// The message of the failed call (out of line: the success path inlines).
#[cold]
#[inline(never)]
fn last_error() -> String {
    // SAFETY: the shim returns a NUL-terminated thread-local string that
    // lives until the next failing call on this thread; we copy it at once.
    let msg = unsafe { CStr::from_ptr(tch_scope_last_error()) };
    msg.to_string_lossy().into_owned()
}

/// Test-only fault injection: the next `times` calls on this thread of the
/// status-returning shim function `op` (`"tch_scope_rng_restore"`), or of
/// one of the Rust side's own fallible steps that asks `injected_fault`
/// (`"durable::sync_dir"`: the folder's fsync after a crash-safe rename),
/// fail with `"injected fault in <op>"`; `op = "*"` matches any of them;
/// `times = 0` disarms. Compiled in always (one
/// thread-local read per fallible shim call), reachable only through
/// `__private`.
pub fn inject_fault(op: &str, times: u32) {
    RUST_FAULT.with_borrow_mut(|f| *f = (op.to_owned(), times));
    let op = std::ffi::CString::new(op).expect("a shim function name has no NUL byte");
    // SAFETY: a NUL-terminated string the shim copies; a plain integer.
    unsafe { tch_scope_fault_inject(op.as_ptr(), i32::try_from(times).unwrap_or(i32::MAX)) }
}

thread_local! {
    /// [`inject_fault`]'s switch for the Rust side: the op and how many
    /// more times it fails.
    static RUST_FAULT: std::cell::RefCell<(String, u32)> =
        const { std::cell::RefCell::new((String::new(), 0)) };
}

/// Test-only: `"injected fault in <op>"` when the Rust side's step `op` is
/// to fail this time (see [`inject_fault`]), else `None`.
pub(crate) fn injected_fault(op: &str) -> Option<String> {
    RUST_FAULT.with_borrow_mut(|(armed, times)| {
        if *times == 0 || (armed != "*" && armed != op) {
            return None;
        }
        *times -= 1;
        Some(format!("injected fault in {op}"))
    })
}

/// Whether the shim was built against a CUDA libtorch (and so keeps
/// libtorch_cuda loaded).
pub(crate) fn built_with_cuda() -> bool {
    // SAFETY: no arguments, cannot fail.
    unsafe { tch_scope_built_with_cuda() != 0 }
}
