//! Signals end a run cleanly: while a `checkpoint` scope is open, SIGINT,
//! SIGTERM and SIGUSR1 request a stop instead of killing the process. The
//! whole story is on [`stop_requested`], the public entry point (this
//! module is private). `handler` holds the signal side, `refusal` the
//! refusal of operators (`csrc/deadline.cpp` holds its dispatcher side).

mod handler;
mod refusal;

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};

use crate::ScopeError;
use handler::{LISTENERS, STOPPED_BY};

/// The stop signals; the default is SIGINT, SIGTERM, SIGUSR1.
static STOP_SIGNALS: Mutex<Option<Vec<i32>>> = Mutex::new(None);

fn default_signals() -> Vec<i32> {
    vec![libc::SIGINT, libc::SIGTERM, libc::SIGUSR1]
}

/// Whether a stop signal came while a checkpoint was open: a loop of your
/// own checks it between its steps and ends there (the checkpoint saves
/// on the way out, then the process ends as the signal would have).
///
/// # Stopping on a signal
///
/// Signals end a run cleanly: while a `checkpoint` scope is open, SIGINT,
/// SIGTERM and SIGUSR1 (SLURM's warning before preemption) request a stop
/// instead of killing the process (see [`set_stop_signals`] to choose
/// others).
///
/// What a stop does (it first writes one line on stderr, so that whoever
/// pressed Ctrl-C sees it was heard):
/// - This function returns true, for a loop of your own to check between
///   its steps; a [`steps`](crate::steps) loop ends at the next step
///   boundary (its operators are not refused: the step runs whole).
/// - Outside a `steps` loop it acts like a passed `deadline`: the next
///   libtorch operator of every thread inside an open checkpoint is
///   refused ("stopped by SIGINT at aten::mm: the checkpoint saves and the
///   process ends; press Ctrl-C again to end it at once"), so the body
///   unwinds (tch's `f_` methods return the error, the others panic with
///   it, and a `deadline` scope on the way ends with it as its
///   [`ScopeError`]). `save_on_failure` then decides as for any failed
///   exit.
/// - Every open checkpoint saves on its way out, innermost first; when the
///   last one has ended, the process ends *as the signal would have ended
///   it*: killed by that signal, so a shell reads 130 for SIGINT, 143 for
///   SIGTERM and 138 for SIGUSR1, and torchrun reports the signal.
/// - A second stop signal ends the process at once, the same way (killed
///   by the second signal: 130 for a second Ctrl-C), even in the middle of
///   a save; the previous checkpoint file stays whole (saves replace the
///   file by a rename).
///
/// What it costs: nothing per operator until a stop comes. The threads
/// inside a checkpoint carry a dispatch key whose fallback is a
/// fallthrough, which libtorch's dispatcher masks out; at a stop, a
/// watcher thread (a signal handler may touch neither another thread's
/// state nor the dispatcher) registers the refusing kernel on every
/// operator, which takes some milliseconds (5 to 18 ms measured here);
/// until then the threads go on running operators. (A `deadline`'s check
/// runs before every operator: ≈ 120 ns each here.)
///
/// Handlers are installed when the first checkpoint opens (through the
/// `signal-hook` crate's registry, which chains to handlers installed
/// before it and runs the application's own `signal-hook` actions beside
/// ours); while no checkpoint is open, each signal does what it did before
/// the first one opened: one that was left at its default ends the process
/// by the signal, one the application handles goes to its handler. A
/// signal that was ignored (`nohup`, a background job's SIGINT) stays
/// ignored. One limit: an application that registers a `signal-hook`
/// action for a stop signal *after* the first checkpoint opened, for a
/// signal that had no handler before, still sees the process end on it
/// while no checkpoint is open (register yours before, or choose the
/// signals with [`set_stop_signals`]).
///
/// Beside Python: PyTorch code gets Ctrl-C as `KeyboardInterrupt`, raised
/// between two bytecodes of the main thread, so `finally` blocks and
/// `with` exits run, and Python then ends killed by SIGINT; SIGTERM has no
/// handler by default and kills the process at once (no `finally`).
/// Lightning's SLURM support catches SIGUSR1/SIGTERM, saves a checkpoint
/// and requeues the job. Here both signals (and SIGUSR1) get the
/// `finally` treatment, on any thread inside a checkpoint, and the stop
/// reaches code inside a libtorch call at its next operator.
///
/// ```no_run
/// # let vs = tch::nn::VarStore::new(tch::Device::Cpu);
/// tch_scope::scoped!(checkpoint(vs, "run.ot", resume) => {
///     for _epoch in 0..100 {
///         if tch_scope::stop_requested() {
///             break;
///         }
///         // one epoch
///     }
/// });
/// ```
pub fn stop_requested() -> bool {
    STOPPED_BY.load(Ordering::SeqCst) != 0
}

/// The signal of the stop requested, if one came (`libc::SIGINT`, ...).
///
/// ```no_run
/// assert_eq!(tch_scope::stop_signal(), None);
/// ```
pub fn stop_signal() -> Option<i32> {
    match STOPPED_BY.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// Chooses the signals that request a stop while a checkpoint is open
/// (`libc::SIGINT`, `libc::SIGTERM`, `libc::SIGUSR1` by default); an empty
/// list turns stopping on a signal off. Takes effect at once, for the
/// checkpoints open now too; a signal taken out of the list does again
/// what it did before (see [`stop_requested`]).
///
/// # Errors
/// A number that is no signal, or one that can't request a stop: SIGKILL
/// and SIGSTOP (no handler may take them), and the faults and aborts
/// (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS, SIGABRT), after whose
/// handler the process must not simply go on.
///
/// ```no_run
/// tch_scope::set_stop_signals(&[libc::SIGTERM]).unwrap(); // Ctrl-C kills at once
/// assert!(tch_scope::set_stop_signals(&[libc::SIGKILL]).is_err());
/// ```
pub fn set_stop_signals(signals: &[i32]) -> Result<(), ScopeError> {
    if let Some(&bad) = signals.iter().find(|&&s| !handler::valid(s)) {
        return Err(ScopeError::new(
            "set_stop_signals",
            None,
            format!(
                "{bad} ({}) can't request a stop: no handler may take it",
                handler::name(bad)
            ),
        ));
    }
    let mut current = STOP_SIGNALS.lock().unwrap_or_else(PoisonError::into_inner);
    if LISTENERS.load(Ordering::SeqCst) > 0 {
        refusal::watcher()
            .and_then(|wake| handler::install(signals, wake))
            .map_err(|e| ScopeError::new("set_stop_signals", None, e))?;
    }
    handler::set_stop(signals);
    *current = Some(signals.to_vec());
    Ok(())
}

/// The signals that request a stop now (see [`set_stop_signals`]).
///
/// ```no_run
/// assert!(tch_scope::stop_signals().contains(&libc::SIGINT));
/// ```
pub fn stop_signals() -> Vec<i32> {
    STOP_SIGNALS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_else(default_signals)
}

/// While alive, the stop signals request a stop instead of ending the
/// process. Any number may be alive on any threads (a count); when the
/// last one drops, the signals do again what they did before.
///
/// It also marks the thread it is on (from [`listen`], or the last
/// [`resume`](Self::resume)) so that after a stop that thread's libtorch
/// operators are refused; a checkpoint held by a task moves it with
/// [`suspend`](Self::suspend) / [`resume`](Self::resume).
#[must_use = "signals request a stop only while the listener is alive"]
#[derive(Debug)]
pub(crate) struct StopListener {
    /// The mark's previous state on the thread that has it, if one has.
    on_thread: Option<bool>,
}

/// Opens a [`StopListener`]: installs the handlers at the first one (the
/// process's first checkpoint) and marks this thread.
///
/// # Errors
/// The handlers can't be installed, or another library took the
/// dispatcher key the refusal of operators needs.
pub(crate) fn listen() -> Result<StopListener, ScopeError> {
    let err = |e: String| ScopeError::new("stop on a signal", None, e);
    refusal::prepare().map_err(err)?;
    let signals = {
        let current = STOP_SIGNALS.lock().unwrap_or_else(PoisonError::into_inner);
        let signals = current.clone().unwrap_or_else(default_signals);
        if current.is_none() {
            handler::set_stop(&signals);
        }
        signals
    };
    // Counted first: a signal from here on is a stop (once our action is
    // registered; before, it does what it did before).
    LISTENERS.fetch_add(1, Ordering::SeqCst);
    if let Err(e) = refusal::watcher().and_then(|wake| handler::install(&signals, wake)) {
        LISTENERS.fetch_sub(1, Ordering::SeqCst);
        return Err(err(e));
    }
    Ok(StopListener {
        on_thread: Some(refusal::include()),
    })
}

impl StopListener {
    /// Takes this listener's mark off the current thread (a task
    /// suspends): another task polled here is not refused on its behalf.
    pub(crate) fn suspend(&mut self) {
        if let Some(was) = self.on_thread.take() {
            refusal::restore(was);
        }
    }

    /// Marks the current thread (a task is polled, perhaps elsewhere).
    pub(crate) fn resume(&mut self) {
        if self.on_thread.is_none() {
            self.on_thread = Some(refusal::include());
        }
    }
}

impl Drop for StopListener {
    fn drop(&mut self) {
        self.suspend();
        LISTENERS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Ends the process as the stop's signal would have — killed by it, so a
/// shell reads 130 for SIGINT and 143 for SIGTERM — if a stop was
/// requested and no [`StopListener`] is alive any more; otherwise returns
/// (no stop, or an enclosing checkpoint has still to save: the last one
/// to end calls this again). Call it after dropping your own listener.
/// Flushes stdout first; `atexit` handlers do not run, as with any death
/// by a signal.
pub(crate) fn finish_if_stopped() {
    let signal = STOPPED_BY.load(Ordering::SeqCst);
    if signal == 0 || LISTENERS.load(Ordering::SeqCst) > 0 {
        return;
    }
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // Restores the default disposition, unblocks the signal and raises it.
    let _ = signal_hook::low_level::emulate_default_handler(signal);
    // Not reached: a signal whose default is not to end the process (none
    // of the valid stop signals but SIGCHLD-like ones a user chose).
    std::process::exit(128 + signal);
}

/// While alive, a stop does not refuse this thread's operators (a `steps`
/// loop: the stop ends it at the next step boundary instead, so the step
/// runs whole). Nests; `!Send` (a thread's dispatch state).
#[must_use = "the refusal is lifted only while the guard lives"]
#[derive(Debug)]
pub(crate) struct StopDeferred {
    was: bool,
    _not_send: crate::PhantomNotSend,
}

impl StopDeferred {
    /// Lifts the refusal on this thread until the guard drops.
    pub(crate) fn new() -> Self {
        Self {
            was: refusal::defer(),
            _not_send: crate::PhantomNotSend::NEW,
        }
    }
}

impl Drop for StopDeferred {
    fn drop(&mut self) {
        refusal::undefer(self.was);
    }
}

/// Test-only (`tests/stop.rs` and its child process): a listener and the
/// end of a stop without a checkpoint. Not a public API.
#[doc(hidden)]
pub mod testing {
    use crate::ScopeError;

    /// A `StopListener` held by a test.
    #[derive(Debug)]
    pub struct Listener(#[allow(dead_code, reason = "held for its Drop")] super::StopListener);

    /// `listen`.
    ///
    /// # Errors
    /// As `listen`.
    pub fn listen() -> Result<Listener, ScopeError> {
        super::listen().map(Listener)
    }

    /// `finish_if_stopped`.
    pub fn finish_if_stopped() {
        super::finish_if_stopped();
    }

    /// A `StopDeferred` (a `steps` loop's).
    #[derive(Debug)]
    pub struct Deferred(#[allow(dead_code, reason = "held for its Drop")] super::StopDeferred);

    /// Lifts the refusal of operators on this thread while alive.
    pub fn defer() -> Deferred {
        Deferred(super::StopDeferred::new())
    }

    /// Whether a stop's refusal of operators is on (the watcher thread
    /// switches it on shortly after the signal).
    pub fn refusing() -> bool {
        super::refusal::is_on()
    }
}

#[cfg(test)]
mod tests {
    use super::{handler, refusal};

    #[test]
    fn stop_signals_refuse_what_no_handler_may_take() {
        for bad in [
            0,
            -1,
            65,
            libc::SIGKILL,
            libc::SIGSTOP,
            libc::SIGSEGV,
            libc::SIGBUS,
        ] {
            let e = super::set_stop_signals(&[bad]).unwrap_err();
            assert!(e.to_string().contains("can't request a stop"), "{e}");
        }
        assert_eq!(
            super::stop_signals(),
            [libc::SIGINT, libc::SIGTERM, libc::SIGUSR1]
        );
    }

    #[test]
    fn stop_message_names_the_signal_and_the_second_one() {
        let (head, tail) = refusal::message_parts(libc::SIGINT);
        assert_eq!(head, "stopped by SIGINT");
        assert!(
            tail.ends_with("press Ctrl-C again to end it at once"),
            "{tail}"
        );
        let (head, tail) = refusal::message_parts(libc::SIGTERM);
        assert_eq!(head, "stopped by SIGTERM");
        assert!(tail.ends_with("a second SIGTERM ends it at once"), "{tail}");
        assert_eq!(handler::name(40), "signal 40");
    }

    #[test]
    fn without_a_stop_nothing_is_requested() {
        assert!(!super::stop_requested());
        assert_eq!(super::stop_signal(), None);
        // Returns: no stop came.
        super::finish_if_stopped();
    }
}
