//! Outside a `steps` loop, a stop refuses the next libtorch operator of
//! every thread inside an open checkpoint (`csrc/deadline.cpp` holds the
//! dispatcher's side and says why it costs nothing until a stop comes).

use std::ffi::CString;
use std::io::Read;
use std::os::fd::IntoRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use super::handler;

use crate::ffi;

unsafe extern "C" {
    fn tch_scope_stop_prepare() -> ffi::Status;
    fn tch_scope_stop_refuse(
        head: *const std::ffi::c_char,
        tail: *const std::ffi::c_char,
    ) -> ffi::Status;
    fn tch_scope_stop_include() -> bool;
    fn tch_scope_stop_restore(was: bool);
    fn tch_scope_stop_defer() -> bool;
    fn tch_scope_stop_undefer(was: bool);
}

/// Registers the dispatcher's fallthrough on the stop's key, once.
///
/// # Errors
/// Another library registered a fallback on that key.
pub(super) fn prepare() -> Result<(), String> {
    // SAFETY: no arguments; exceptions caught by the shim.
    ffi::check(unsafe { tch_scope_stop_prepare() })
}

/// The refused operator's message, around the operator's name: "stopped
/// by SIGINT" + " at aten::mm" + tail.
pub(super) fn message_parts(signal: i32) -> (String, String) {
    let again = if signal == libc::SIGINT {
        "press Ctrl-C again to end it at once".to_owned()
    } else {
        format!("a second {} ends it at once", handler::name(signal))
    };
    (
        format!("stopped by {}", handler::name(signal)),
        format!(": the checkpoint saves and the process ends; {again}"),
    )
}

/// Whether the refusal is on (the watcher switched it on).
static ON: AtomicBool = AtomicBool::new(false);

/// Whether a stop's refusal of operators is on.
pub(super) fn is_on() -> bool {
    ON.load(Ordering::SeqCst)
}

/// Switches the refusal on (the watcher thread, once a stop came).
pub(super) fn switch_on(signal: i32) {
    let (head, tail) = message_parts(signal);
    let (Ok(head), Ok(tail)) = (CString::new(head), CString::new(tail)) else {
        return;
    };
    // SAFETY: NUL-terminated strings the shim copies; exceptions caught.
    if let Err(e) = ffi::check(unsafe { tch_scope_stop_refuse(head.as_ptr(), tail.as_ptr()) }) {
        // Loops that check `stop_requested` still stop; say why the
        // operators were not refused.
        crate::exit::report(
            "stop",
            format_args!("could not refuse operators after a stop: {e}"),
        );
        return;
    }
    ON.store(true, Ordering::SeqCst);
}

/// This thread's operators are refused after a stop while the mark is on
/// it; returns whether it was on already (for [`restore`]).
pub(super) fn include() -> bool {
    // SAFETY: two thread-local words; never throws.
    unsafe { tch_scope_stop_include() }
}

/// Puts this thread's mark back as [`include`] found it.
pub(super) fn restore(was: bool) {
    // SAFETY: two thread-local words; never throws.
    unsafe { tch_scope_stop_restore(was) }
}

/// Lifts the refusal on this thread; returns whether it was lifted
/// already (for [`undefer`]).
pub(super) fn defer() -> bool {
    // SAFETY: two thread-local words; never throws.
    unsafe { tch_scope_stop_defer() }
}

/// Puts this thread's lifting back as [`defer`] found it.
pub(super) fn undefer(was: bool) {
    // SAFETY: two thread-local words; never throws.
    unsafe { tch_scope_stop_undefer(was) }
}

/// The write end of the watcher's socket, once it runs.
static WATCHER: Mutex<Option<i32>> = Mutex::new(None);

/// Starts the watcher thread once and gives the write end of its socket,
/// for the signal action to wake it. Woken, it switches the refusal on:
/// registering kernels with libtorch's dispatcher allocates and locks,
/// which a signal handler must not.
///
/// # Errors
/// No socket or no thread could be made.
pub(super) fn watcher() -> Result<i32, String> {
    let mut fd = WATCHER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(fd) = *fd {
        return Ok(fd);
    }
    let (mut rx, tx) = UnixStream::pair().map_err(|e| format!("no socket for the watcher: {e}"))?;
    tx.set_nonblocking(true)
        .map_err(|e| format!("no socket for the watcher: {e}"))?;
    std::thread::Builder::new()
        .name("tch-scope-stop".into())
        .spawn(move || {
            let mut byte = [0u8; 1];
            while rx.read(&mut byte).is_ok_and(|n| n > 0) {
                let signal = handler::STOPPED_BY.load(Ordering::SeqCst);
                if signal != 0 {
                    switch_on(signal);
                }
            }
        })
        .map_err(|e| format!("could not start the watcher thread: {e}"))?;
    // The write end lives for the process, like the watcher.
    let raw = tx.into_raw_fd();
    *fd = Some(raw);
    Ok(raw)
}
