//! Failures on the way out of a scope, and the hook that hears of them.
//!
//! A guard restores state in `Drop`, which cannot return an error and must
//! not panic (it may run while a panic unwinds, and a second panic there
//! aborts the process). So a restore that fails (the shim reports a C++
//! exception, a checkpoint cannot be written) is handed to the exit hook
//! and the guard carries on: the rest of the unwinding, the outer guards,
//! the program.
//!
//! On the success path of `try_scoped!` (and `scoped!`), the expansion
//! leaves each scope through `finish`, which catches the errors reported
//! meanwhile on this thread instead: the caller gets the first as an
//! `Err(ScopeError)` (`scoped!` panics with it), the hook none of them.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// A scope that could not put everything back when it was left: which
/// scope, and why. Guards hand it to the hook set with [`set_exit_hook`]
/// (by default, one line on stderr).
///
/// ```
/// let e = tch_scope::ExitError::new("fork_rng", "generator gone");
/// assert_eq!(e.to_string(), "could not leave `fork_rng` cleanly: generator gone");
/// assert_eq!((e.scope(), e.reason()), ("fork_rng", "generator gone"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("could not leave `{scope}` cleanly: {reason}")]
pub struct ExitError {
    scope: Cow<'static, str>,
    reason: String,
}

impl ExitError {
    /// A new exit error for `scope` (the scope word: `"fork_rng"`,
    /// `"eval"`) with a human-readable `reason`.
    ///
    /// ```no_run
    /// let e = tch_scope::ExitError::new("my_scope", "lost the handle");
    /// assert_eq!(e.scope(), "my_scope");
    /// ```
    pub fn new(scope: impl Into<Cow<'static, str>>, reason: impl Into<String>) -> Self {
        Self {
            scope: scope.into(),
            reason: reason.into(),
        }
    }

    /// The scope that could not be left cleanly.
    ///
    /// ```no_run
    /// assert_eq!(tch_scope::ExitError::new("autocast", "x").scope(), "autocast");
    /// ```
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// What went wrong.
    ///
    /// ```no_run
    /// assert_eq!(tch_scope::ExitError::new("autocast", "why").reason(), "why");
    /// ```
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// Reports this error, as the built-in guards do when they cannot
    /// restore: to the exit hook ([`set_exit_hook`]), or, when the scope is
    /// being left on the success path of [`try_scoped!`](crate::try_scoped)
    /// or [`scoped!`](crate::scoped), to the caller, as an
    /// `Err(ScopeError)` or a panic. For a [`Scope`](crate::Scope) whose
    /// exit can fail: call it from [`Scope::exit`](crate::Scope::exit) or
    /// from the guard's `Drop`.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use tch_scope::{ExitError, Scope, try_scoped};
    ///
    /// struct Upload;
    /// impl Scope for Upload {
    ///     type Guard = ();
    ///     type Error = Infallible;
    ///     fn enter(&mut self) -> Result<(), Infallible> { Ok(()) }
    ///     fn exit(_: &mut (), _: tch_scope::Outcome) {
    ///         ExitError::new("upload", "the server said no").report();
    ///     }
    /// }
    ///
    /// let e = try_scoped!(with(Upload) => 1).unwrap_err();
    /// assert_eq!(e.to_string(), "could not leave `upload` cleanly: the server said no");
    /// ```
    pub fn report(self) {
        report_error(self);
    }
}

impl From<ExitError> for crate::ScopeError {
    /// An error of a scope that was entered and could not be left cleanly
    /// ([`ScopeError::is_ended`](crate::ScopeError::is_ended)): its message
    /// is the `ExitError`'s.
    fn from(e: ExitError) -> Self {
        let msg = e.to_string();
        crate::ScopeError::ended(e.scope, None, msg)
    }
}

const IDLE: u8 = 0;
const CATCHING: u8 = 1;
const CAUGHT: u8 = 2;

thread_local! {
    /// `CATCHING` while a `finish` runs on this thread (errors go to
    /// `FIRST`), `CAUGHT` once one has.
    static STATE: Cell<u8> = const { Cell::new(IDLE) };
    static FIRST: RefCell<Option<ExitError>> = const { RefCell::new(None) };
    /// An exit error a completed [`Spanned`](crate::Spanned) future hands
    /// to the code that awaited it (which runs next, on this thread, in the
    /// same poll).
    static HANDED: RefCell<Option<ExitError>> = const { RefCell::new(None) };
}

/// Keeps `e` for [`take_handed`]; one left there untaken goes to the hook.
pub(crate) fn hand_over(e: ExitError) {
    if let Some(stale) = HANDED.with_borrow_mut(|slot| slot.replace(e)) {
        to_hook(&stale);
    }
}

/// The exit error handed over on this thread, if any.
pub(crate) fn take_handed() -> Option<ExitError> {
    HANDED
        .try_with(|slot| slot.borrow_mut().take())
        .ok()
        .flatten()
}

/// Runs `leave` (a guard's exit and drop) catching the exit errors it
/// reports on this thread: the first comes back, any others go to the hook.
#[inline]
pub(crate) fn catching(leave: impl FnOnce()) -> Result<(), ExitError> {
    let was = STATE.replace(CATCHING);
    leave();
    let now = STATE.replace(was);
    if was != IDLE {
        // An outer `finish` collects what was caught.
        if now == CAUGHT {
            STATE.set(CAUGHT);
        }
        return Ok(());
    }
    if now != CAUGHT {
        return Ok(());
    }
    match FIRST.with_borrow_mut(Option::take) {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

type Hook = Arc<dyn Fn(&ExitError) + Send + Sync>;

static HOOK: RwLock<Option<Hook>> = RwLock::new(None);
static REPORTED: AtomicU64 = AtomicU64::new(0);

/// Sets the function that hears of every [`ExitError`], on the thread
/// where the guard was dropped, replacing the default (one line on stderr,
/// plus a `tracing` error event with the `tracing` feature). Process-wide,
/// like `std::panic::set_hook`.
///
/// The hook runs inside `Drop`, perhaps while a panic unwinds: keep it
/// short. If it panics, the panic is caught and the error goes to stderr.
///
/// ```no_run
/// use std::sync::Mutex;
/// static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// tch_scope::set_exit_hook(|e| SEEN.lock().unwrap().push(e.scope().to_owned()));
/// // … a guard that fails to restore would be recorded in SEEN …
/// tch_scope::reset_exit_hook();
/// ```
pub fn set_exit_hook(hook: impl Fn(&ExitError) + Send + Sync + 'static) {
    *crate::sync::write(&HOOK) = Some(Arc::new(hook));
}

/// Puts the default exit hook back (one line on stderr).
///
/// ```no_run
/// tch_scope::set_exit_hook(|_| {});
/// tch_scope::reset_exit_hook();
/// ```
pub fn reset_exit_hook() {
    *crate::sync::write(&HOOK) = None;
}

/// How many exit errors this process has reported so far (to any hook).
///
/// ```no_run
/// let n = tch_scope::exit_errors_reported();
/// assert!(tch_scope::exit_errors_reported() >= n);
/// ```
pub fn exit_errors_reported() -> u64 {
    REPORTED.load(Ordering::Relaxed)
}

/// Reports a failed restore. Never panics, never blocks on another hook
/// call: the hook is cloned out of the lock before it runs, so a hook may
/// itself set a hook or drop a failing guard.
pub(crate) fn report(scope: impl Into<Cow<'static, str>>, reason: impl std::fmt::Display) {
    report_error(ExitError::new(scope, reason.to_string()));
}

/// Hands `error` to the hook whatever this thread is doing: a notice that
/// is no failure of the scope being left (the bound on measurement names),
/// so a `try_scoped!` on its success path must not return it as an `Err`.
pub(crate) fn notify(error: ExitError) {
    to_hook(&error);
}

fn report_error(error: ExitError) {
    if STATE.get() != IDLE && !std::thread::panicking() {
        STATE.set(CAUGHT);
        let error = FIRST.with_borrow_mut(|slot| match slot {
            None => {
                *slot = Some(error);
                None
            }
            Some(_) => Some(error),
        });
        match error {
            None => return,
            Some(error) => return to_hook(&error),
        }
    }
    to_hook(&error);
}

pub(crate) fn to_hook(error: &ExitError) {
    REPORTED.fetch_add(1, Ordering::Relaxed);
    let hook = crate::sync::read(&HOOK).clone();
    match hook {
        Some(hook) => {
            if catch_unwind(AssertUnwindSafe(|| hook(error))).is_err() {
                default_hook(error);
                stderr_line(format_args!("(the exit hook panicked on the error above)"));
            }
        }
        None => default_hook(error),
    }
}

fn default_hook(error: &ExitError) {
    #[cfg(feature = "tracing")]
    tracing::error!(scope = error.scope(), reason = error.reason(), "{error}");
    stderr_line(format_args!("{error}"));
}

/// One line on stderr; a failed write is ignored (there is nowhere else).
fn stderr_line(msg: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "tch-scope: {msg}");
}
