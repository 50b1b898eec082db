//! Serving: the `/v2` routes merged in, the address bound and announced
//! on stdout, and connections accepted under `--max-connections`, each
//! served by `tch_scope::serve::connections`, until the first signal;
//! then [`shutdown::drain`].

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use axum::Router;
use tokio::sync::watch;

use crate::app::App;
use crate::flags::Args;
use crate::oip;
use crate::shutdown::{self, Closing};
use tch_scope::serve::connections::serve_connection;

/// Serves until the first signal, then drains (`closing` and `workers`:
/// see [`shutdown::drain`]). Whether every connection finished in time.
pub(crate) async fn serve(
    args: &Args,
    app: Arc<App>,
    router: Router,
    closing: Option<Closing>,
    workers: &mut Vec<JoinHandle<()>>,
) -> Result<bool, String> {
    let bound = args.shutdown_timeout;
    let (stop_tx, mut stop) = watch::channel(false);
    let (abort_tx, abort) = watch::channel(false);
    shutdown::watch_signals(stop_tx, bound)?;
    // The protocol's routes over the batcher (a warm-up run of theirs
    // first: it makes the outputs' metadata).
    let oip = match &app.batched {
        Some(b) => oip::routes(args, b).await?,
        None => None,
    };
    let (router, oip_name) = match oip {
        Some((name, v2)) => (router.merge(v2), Some(name)),
        None => (router, None),
    };
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.addr))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let upkeep = app.metrics.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    let kind = if args.plain { "plain tch" } else { "tch-scope" };
    let format = if args.model_is_package() {
        ".pt2 package"
    } else {
        "TorchScript"
    };
    let batches = if args.batching() {
        format!(
            ", batches of up to {} within {} ms",
            args.max_batch,
            args.max_delay.as_millis()
        )
    } else {
        String::new()
    };
    let v2 = oip_name
        .map(|n| format!(", Open Inference Protocol as {n:?}"))
        .unwrap_or_default();
    println!(
        "listening on http://{local} ({kind}, {} workers, queue {}{batches}, {format} model {}{v2})",
        args.workers,
        args.queue,
        args.model.display()
    );

    // Accepts while under the cap: past it, connections wait in the
    // kernel's backlog and cost this process nothing.
    let connections = Arc::clone(&app.connections);
    loop {
        let permit = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            p = Arc::clone(&connections).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            r = listener.accept() => r,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors, or a connection reset
                // before it was accepted: wait a little, go on.
                eprintln!("serve: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        tokio::spawn(serve_connection(
            tcp,
            router.clone(),
            args.limits(),
            stop.clone(),
            abort.clone(),
            permit,
        ));
    }
    shutdown::drain(listener, app, router, &abort_tx, closing, workers, bound).await
}
