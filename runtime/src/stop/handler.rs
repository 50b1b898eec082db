//! The signal side of a stop: one `signal-hook` action per stop signal,
//! registered at the first listener and kept for the life of the process;
//! a stop wakes the watcher thread (`refusal::watcher`), which does what a
//! signal handler may not.
//!
//! Why the action stays registered: signal-hook's registry installs its
//! own OS handler for a signal at the first registration and keeps it,
//! and `unregister` only removes the action: with no action left, the
//! registry's handler runs nothing (it chains only to a *function* that
//! was installed before it, never to `SIG_DFL`), so SIGTERM would be
//! ignored from then on. Instead, the action stays and, while no listener
//! is open, does what the disposition found before the registry's handler
//! did: a signal that was `SIG_DFL` ends the process by that signal
//! (`emulate_default_handler`), a signal that had a handler runs it (the
//! registry chains to it), and the application's own signal-hook actions
//! run beside ours at all times.
//!
//! Everything the action reads is an atomic: a signal handler may take no
//! lock and allocate nothing.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use signal_hook::low_level::{emulate_default_handler, signal_name};

/// One past the largest signal number (`SIGRTMAX` is 64 on Linux).
pub(super) const SIGNALS: usize = 65;

/// The signal of the first stop, 0 while none came.
pub(super) static STOPPED_BY: AtomicI32 = AtomicI32::new(0);
/// Listeners alive (`StopListener`s), any thread.
pub(super) static LISTENERS: AtomicUsize = AtomicUsize::new(0);

/// Per signal: whether it is one of the stop signals now.
static IS_STOP: [AtomicBool; SIGNALS] = [const { AtomicBool::new(false) }; SIGNALS];
/// Per signal: whether its disposition was `SIG_DFL` when we first
/// registered for it (then, with no listener, it ends the process).
static DEFAULT_BEFORE: [AtomicBool; SIGNALS] = [const { AtomicBool::new(false) }; SIGNALS];
/// Per signal: whether our action is registered.
static REGISTERED: [AtomicBool; SIGNALS] = [const { AtomicBool::new(false) }; SIGNALS];
/// The write end of the watcher's socket (`refusal::watcher`), -1 before
/// the first listener.
static WAKE: AtomicI32 = AtomicI32::new(-1);

/// Serializes installation (not the handler: it takes no lock).
static INSTALL: Mutex<()> = Mutex::new(());

/// Signals that can't request a stop: those signal-hook refuses (SIGKILL,
/// SIGSTOP, SIGILL, SIGFPE, SIGSEGV) and the other faults and aborts, whose
/// handler must not simply return.
const REFUSED: [i32; 9] = [
    libc::SIGKILL,
    libc::SIGSTOP,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGTRAP,
    libc::SIGSYS,
    libc::SIGABRT,
];

/// Whether `signal` is a number this module can hold a flag for and may
/// take as a stop signal.
pub(super) fn valid(signal: i32) -> bool {
    usize::try_from(signal).is_ok_and(|s| s > 0 && s < SIGNALS)
        && !REFUSED.contains(&signal)
        && !signal_hook::consts::FORBIDDEN.contains(&signal)
}

/// `SIGINT`, or `signal 40` for one without a name.
pub(super) fn name(signal: i32) -> String {
    signal_name(signal).map_or_else(|| format!("signal {signal}"), str::to_owned)
}

/// Marks exactly `signals` as stop signals (the others stop being ones).
pub(super) fn set_stop(signals: &[i32]) {
    for (s, flag) in IS_STOP.iter().enumerate() {
        let on = signals.iter().any(|&x| usize::try_from(x) == Ok(s));
        flag.store(on, Ordering::SeqCst);
    }
}

/// Registers our action for every stop signal not yet registered; a stop
/// writes a byte to `wake`, the watcher's socket.
pub(super) fn install(signals: &[i32], wake: i32) -> Result<(), String> {
    let _one = INSTALL.lock().unwrap_or_else(PoisonError::into_inner);
    WAKE.store(wake, Ordering::SeqCst);
    for &signal in signals {
        let i = index(signal);
        if REGISTERED[i].load(Ordering::SeqCst) {
            continue;
        }
        let before = disposition(signal)?;
        if before == libc::SIG_IGN {
            // Ignored (`nohup`, a background job's SIGINT): it stays so,
            // as Python leaves an ignored SIGINT alone.
            IS_STOP[i].store(false, Ordering::SeqCst);
            continue;
        }
        DEFAULT_BEFORE[i].store(before == libc::SIG_DFL, Ordering::SeqCst);
        // SAFETY: the action is async-signal-safe: atomics, write(2), and
        // signal-hook's emulate_default_handler (documented as such).
        unsafe { signal_hook::low_level::register(signal, move || on_signal(signal)) }
            .map_err(|e| format!("could not handle {}: {e}", name(signal)))?;
        REGISTERED[i].store(true, Ordering::SeqCst);
    }
    Ok(())
}

fn index(signal: i32) -> usize {
    usize::try_from(signal).unwrap_or(0)
}

/// The disposition of `signal` now (`SIG_DFL`, `SIG_IGN` or a handler).
fn disposition(signal: i32) -> Result<libc::sighandler_t, String> {
    // SAFETY: a zeroed sigaction is a valid out-param; a null `act` only
    // reads the disposition.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, std::ptr::null(), &mut old) != 0 {
            return Err(format!(
                "could not read the handler of {}: {}",
                name(signal),
                std::io::Error::last_os_error()
            ));
        }
        Ok(old.sa_sigaction)
    }
}

/// The action, in the signal handler: the first stop signal while a
/// listener is open requests the stop; a second ends the process at once;
/// with no listener, the signal does what it did before.
fn on_signal(signal: i32) {
    let i = index(signal);
    let listening = LISTENERS.load(Ordering::SeqCst) > 0;
    if listening && IS_STOP[i].load(Ordering::SeqCst) {
        if STOPPED_BY
            .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            say(notice(signal));
            let fd = WAKE.load(Ordering::SeqCst);
            if fd >= 0 {
                // SAFETY: write(2) is async-signal-safe; a full socket
                // means the watcher is awake already.
                unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
            }
            return;
        }
        // The second stop signal: at once, as the signal itself would.
        say(b"tch-scope: second stop signal, ending at once\n");
        let _ = emulate_default_handler(signal);
        return;
    }
    let stopping = STOPPED_BY.load(Ordering::SeqCst) != 0;
    if DEFAULT_BEFORE[i].load(Ordering::SeqCst) || (stopping && IS_STOP[i].load(Ordering::SeqCst)) {
        let _ = emulate_default_handler(signal);
    }
}

/// The line a first stop writes on stderr (static: no allocation in a
/// signal handler), so that whoever pressed Ctrl-C sees it was heard.
fn notice(signal: i32) -> &'static [u8] {
    match signal {
        libc::SIGINT => {
            b"\ntch-scope: SIGINT: stopping (the open checkpoints save, then the process ends); press Ctrl-C again to end it at once\n"
        }
        libc::SIGTERM => {
            b"tch-scope: SIGTERM: stopping (the open checkpoints save, then the process ends); a second SIGTERM ends it at once\n"
        }
        libc::SIGUSR1 => {
            b"tch-scope: SIGUSR1: stopping (the open checkpoints save, then the process ends); a second SIGUSR1 ends it at once\n"
        }
        _ => {
            b"tch-scope: stop signal: stopping (the open checkpoints save, then the process ends); a second one ends it at once\n"
        }
    }
}

/// Writes to stderr from a signal handler (write(2), no allocation).
fn say(msg: &[u8]) {
    // SAFETY: write(2) on fd 2 is async-signal-safe.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}
