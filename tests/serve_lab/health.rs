//! `GET /healthz` and `GET /readyz`: the workers' phases read, with the
//! reason for a 503.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;

use crate::answers::json_response;
use crate::app::App;
use crate::workers::Phase;

/// Why the server is short of model workers, if it is: every worker
/// ended, or some (named where the server knows which: a batcher thread
/// that ended before its first forward is only counted).
fn workers_lost(app: &App) -> Option<String> {
    let n = app.worker_count();
    let live = app.live();
    if live >= n {
        return None;
    }
    let gone: Vec<usize> = (0..n)
        .filter(|&i| app.workers.phase(i).0 == Phase::Gone)
        .collect();
    Some(if live == 0 {
        format!("no model worker is running: all {n} ended (gone: {gone:?})")
    } else {
        format!(
            "{} of {n} model workers ended (gone: {gone:?}); {live} running",
            n - live
        )
    })
}

/// 200 while every worker is alive and none has been on one job longer
/// than `--stuck-after-s`; 503 otherwise, naming them, with the reason.
pub(crate) async fn healthz(State(app): State<Arc<App>>) -> Response {
    #[derive(Serialize)]
    struct Worker {
        worker: usize,
        state: &'static str,
        for_s: f64,
    }
    #[derive(Serialize)]
    struct Body {
        status: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        stuck: Vec<usize>,
        gone: Vec<usize>,
        workers: Vec<Worker>,
    }
    let (mut stuck, mut gone, mut list) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..app.worker_count() {
        let (phase, for_) = app.workers.phase(i);
        match phase {
            Phase::Gone => gone.push(i),
            Phase::Busy | Phase::Starting if for_ > app.stuck_after => stuck.push(i),
            _ => {}
        }
        list.push(Worker {
            worker: i,
            state: phase.name(),
            for_s: for_.as_secs_f64(),
        });
    }
    let mut reasons: Vec<String> = workers_lost(&app).into_iter().collect();
    if !stuck.is_empty() {
        reasons.push(format!(
            "workers {stuck:?} on one job for more than {} s",
            app.stuck_after.as_secs_f64()
        ));
    }
    let ok = reasons.is_empty() && gone.is_empty();
    json_response(
        if ok {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        &Body {
            status: if ok { "ok" } else { "unhealthy" },
            reason: (!reasons.is_empty()).then(|| reasons.join("; ")),
            stuck,
            gone,
            workers: list,
        },
    )
}

/// 200 once every worker has run the model once (its warm-up, or a
/// request where the warm-up shape was refused); 503 before, from the
/// first shutdown signal on, and once a worker has ended (the server
/// serves on with those left, but takes no new traffic while its
/// `/healthz` asks for a restart), with the reason.
pub(crate) async fn readyz(State(app): State<Arc<App>>) -> Response {
    let (mut live, mut warmed) = (0, 0);
    for (i, slot) in app.workers.slots.iter().enumerate() {
        if app.workers.phase(i).0 != Phase::Gone {
            live += 1;
            warmed += usize::from(slot.warmed.load(Ordering::Relaxed));
        }
    }
    let live = live.min(app.live());
    let reason = if app.stopping.load(Ordering::Relaxed) {
        Some("stopping".to_string())
    } else if let Some(lost) = workers_lost(&app) {
        Some(lost)
    } else if warmed < live {
        Some(format!(
            "warming up: {warmed} of {live} workers have run the model"
        ))
    } else {
        None
    };
    let ready = reason.is_none();
    let mut body = serde_json::json!({ "ready": ready, "warmed": warmed, "workers": live });
    if let Some(reason) = reason {
        body["reason"] = reason.into();
    }
    json_response(
        if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        &body,
    )
}
