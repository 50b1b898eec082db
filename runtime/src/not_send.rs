//! The one marker that keeps a guard on the thread that made it.

use std::marker::PhantomData;

/// Makes the type holding it `!Send` (and `!Sync`): a guard of state that
/// lives in one OS thread — grad mode, inference mode, the current device,
/// autocast, a thread's deadline, a CUDA stream made current — must be
/// dropped on the thread that entered it, or it would restore another
/// thread's state. Users read this name in "cannot be sent between threads
/// safely" errors; async code never needs to send such a guard, because
/// the macros and [`Scoped`](crate::Scoped) re-enter these scopes around
/// every poll instead of holding them across an `.await`.
///
/// Unlike tracing's marker it is `!Sync` too, on purpose: some guards
/// answer from the calling thread's state (`DeadlineGuard::passed` and
/// `run` read the thread's deadline record), so a `&guard` used on another
/// thread would answer for the wrong thread.
///
/// (The pattern of tracing's `PhantomNotSend`.)
///
/// ```compile_fail
/// fn send<T: Send>(_: T) {}
/// let guard = tch_scope::Scope::enter(&mut tch_scope::NoGrad).unwrap();
/// send(guard); // `PhantomNotSend` cannot be sent between threads safely
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct PhantomNotSend {
    _marker: PhantomData<*mut PerThreadStateMustBeLeftOnItsThread>,
}

/// Never made: its name is what rustc prints when a guard of per-thread
/// state is sent to another thread ("`Send` is not implemented for
/// `*mut PerThreadStateMustBeLeftOnItsThread`"), the reason in one line.
#[allow(dead_code, reason = "only named, in PhantomNotSend")]
pub struct PerThreadStateMustBeLeftOnItsThread;

impl PhantomNotSend {
    /// The marker (it holds nothing).
    pub const NEW: PhantomNotSend = PhantomNotSend {
        _marker: PhantomData,
    };
}

impl std::fmt::Debug for PhantomNotSend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PhantomNotSend")
    }
}
