//! The end of a shutdown: the signals that start it, the batcher's
//! workers let go, and the process's exit when it must not wait for them.
//!
//! Why an exit of its own: libtorch's static destructors run at a normal
//! process exit (`exit`, a return from `main`); a worker thread still in
//! a forward then calls into a torn-down dispatcher and the process dies
//! of SIGSEGV instead of exiting with its status. A shutdown that cut work
//! off, or a second signal, ends the process with `_exit`, which runs no
//! destructors.

use std::future::Future;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use super::routes::App;
use crate::ScopeError;

/// How long a cut-off shutdown waits for the workers to end before it
/// counts them as busy (a forward still running).
const WORKERS_GRACE: Duration = Duration::from_secs(1);

/// A shutdown that cut requests off: the error, and whether a worker was
/// still computing when it gave up waiting.
pub(crate) struct Cut {
    pub(crate) error: ScopeError,
    pub(crate) busy: bool,
}

/// Completes at the first SIGINT or SIGTERM; from then on a second one
/// ends the process at once ([`exit_now`]: 130 for SIGINT, 143 for
/// SIGTERM, as the shell reports a process the signal killed).
///
/// # Errors
/// A [`ScopeError`] when the handlers cannot be installed.
pub(crate) fn signals() -> Result<impl Future<Output = ()> + Send, ScopeError> {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| ScopeError::run("serve", None, format!("cannot watch SIGTERM: {e}")))?;
    Ok(async move {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            // tokio's handlers stay installed: without this task a second
            // signal would do nothing.
            tokio::spawn(async move {
                let code = tokio::select! {
                    _ = tokio::signal::ctrl_c() => 130,
                    _ = term.recv() => 143,
                };
                exit_now(code);
            });
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            tokio::spawn(async {
                let _ = tokio::signal::ctrl_c().await;
                exit_now(130);
            });
        }
    })
}

/// Lets the batcher's workers go once the connections are closed: when
/// every request was answered (`drained`), waits for them to compute what
/// is queued and end (off the runtime's threads); after a cut-off, waits
/// at most [`WORKERS_GRACE`], then leaves them to end on a thread of their
/// own. Whether they were still busy then.
pub(crate) async fn end_workers(app: Arc<App>, drained: bool) -> bool {
    if drained {
        let _ = tokio::task::spawn_blocking(move || drop(app)).await;
        return false;
    }
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(app);
        let _ = done.send(());
    });
    let waited = tokio::task::spawn_blocking(move || ended.recv_timeout(WORKERS_GRACE).is_ok());
    !waited.await.unwrap_or(false)
}

/// Ends the process now with `code`, its output flushed, without running
/// the static destructors a normal exit runs (see the module docs).
pub(crate) fn exit_now(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    #[cfg(unix)]
    // SAFETY: `_exit` ends the process at once; it touches no Rust state
    // and is async-signal-safe.
    unsafe {
        libc::_exit(code)
    }
    #[cfg(not(unix))]
    std::process::exit(code)
}
