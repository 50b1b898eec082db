//! Shutdown: the first SIGTERM or SIGINT stops accepting, the requests in
//! flight finish within `--shutdown-timeout-s` (the connections still busy
//! then are closed), the batcher is closed, and the workers finish what is
//! queued; a second signal exits at once.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::Router;
use tch_scope::Trainable;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::app::App;
use crate::batched::{BatchEngine, close_batcher};
use crate::controls::Controls;
use crate::pool::Engine;

/// What shutdown closes once every handler is gone: the batcher, and the
/// registry whose graveyard holds the workers that `x-debug-fault: die`
/// ended.
pub(crate) struct Closing {
    pub(crate) engine: Arc<BatchEngine>,
    pub(crate) controls: Arc<Controls>,
}

/// The first SIGTERM or SIGINT sets `stop`; the next exits at once.
pub(crate) fn watch_signals(stop: watch::Sender<bool>, bound: Duration) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM: {e}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT: {e}"))?;
    // The name, and the status of a process a signal ended (128 + its
    // number).
    async fn next(
        term: &mut tokio::signal::unix::Signal,
        int: &mut tokio::signal::unix::Signal,
    ) -> (&'static str, i32) {
        tokio::select! {
            _ = term.recv() => ("SIGTERM", 143),
            _ = int.recv() => ("SIGINT", 130),
        }
    }
    tokio::spawn(async move {
        let (name, _) = next(&mut term, &mut int).await;
        eprintln!(
            "serve: {name}: stopping (in flight finished within {} s; another signal exits at once)",
            bound.as_secs_f64()
        );
        let _ = stop.send(true);
        let (name, code) = next(&mut term, &mut int).await;
        eprintln!("serve: {name} again: exiting now");
        std::process::exit(code);
    });
    Ok(())
}

/// Stopping: no new connections; the open ones close after their request
/// in flight (idle ones at once), within `bound`, then those still busy
/// are cut off (`abort`). Every handler is then gone: the batcher is
/// closed (`closing`) and the workers get what is left of the bound to
/// finish what is queued. Whether every connection finished in time.
pub(crate) async fn drain(
    listener: TcpListener,
    app: Arc<App>,
    router: Router,
    abort: &watch::Sender<bool>,
    closing: Option<Closing>,
    workers: &mut Vec<JoinHandle<()>>,
    bound: Duration,
) -> Result<bool, String> {
    let until = Instant::now() + bound;
    drop(listener);
    app.stop();
    let connections = Arc::clone(&app.connections);
    let all = app.max_connections;
    let drained = tokio::time::timeout_at(until.into(), connections.acquire_many(all))
        .await
        .is_ok();
    if !drained {
        let open = all as usize - connections.available_permits();
        eprintln!(
            "serve: {open} connection(s) still busy after {} s: closing them",
            bound.as_secs_f64()
        );
        let _ = abort.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(1), connections.acquire_many(all)).await;
    }
    // Every handler is gone: the last sender of the queue goes with the
    // router's state, and the workers end once it is empty.
    drop(router);
    drop(app);
    if let Some(Closing { engine, controls }) = closing {
        // Workers ended by `x-debug-fault: die` go; the batcher then
        // computes what is queued (its requests' clients are gone:
        // cancelled) and joins its threads, off this runtime.
        controls.graveyard.open();
        let close = std::thread::Builder::new()
            .name("batch-close".into())
            .spawn(move || close_batcher(engine))
            .map_err(|e| format!("cannot close the batcher: {e}"))?;
        workers.push(close);
    }
    // The workers finish what is queued (jobs whose client is gone are
    // skipped); give them what is left of the bound, at least 0.2 s.
    let workers_by = until.max(Instant::now() + Duration::from_millis(200));
    while !workers.iter().all(JoinHandle::is_finished) && Instant::now() < workers_by {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(drained)
}

/// After the runtime: exits with status 1 if a worker is still busy at
/// the bound; else joins them, and says that the pool's tch-scope model
/// is back in its saved modes. An error if requests were cut off.
pub(crate) fn finish(
    workers: Vec<JoinHandle<()>>,
    engine: Option<Arc<Engine>>,
    drained: bool,
) -> Result<(), String> {
    if !workers.iter().all(JoinHandle::is_finished) {
        eprintln!("serve: workers still busy at the shutdown bound: exiting without them");
        std::process::exit(1);
    }
    for w in workers {
        let _ = w.join();
    }
    if let Some(Ok(Engine::Scoped(served))) = engine.map(Arc::try_unwrap) {
        // The model back in the modes it was loaded with.
        let model = served.into_inner();
        let training = model.modes().map(|m| m.iter().filter(|t| **t).count());
        println!("stopped; the model is back in its saved modes ({training:?} modules training)");
    }
    if drained {
        Ok(())
    } else {
        Err("requests were cut off at the shutdown bound".into())
    }
}
