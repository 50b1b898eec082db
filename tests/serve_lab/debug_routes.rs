//! The `--debug` routes: `GET /debug/workers` (each worker's libtorch
//! state, at its start and now, read on the worker itself), and
//! `POST /debug/pause` and `POST /debug/resume` (every worker held, so
//! that tests can fill the queue). One runs at a time.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::answers::{ApiError, json_response};
use crate::app::App;
use crate::pool::Job;
use crate::workers::{DEBUG_WAIT, Gate, Meeting, WorkerReport};

pub(crate) async fn workers(State(app): State<Arc<App>>) -> Response {
    if app.stopping.load(Ordering::SeqCst) {
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "stopping").into_response();
    }
    let Ok(_turn) = tokio::time::timeout(DEBUG_WAIT, app.debug_turn.lock()).await else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "another debug request is running",
        )
        .into_response();
    };
    if app
        .paused
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_some()
    {
        return ApiError::new(StatusCode::CONFLICT, "the workers are paused").into_response();
    }
    let n = app.worker_count();
    let until = Instant::now() + DEBUG_WAIT;
    let meeting = Arc::new(Meeting::new(n));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The batcher's control requests: cancelled if this route goes.
    let mut tickets = Vec::new();
    for _ in 0..n {
        let job = Job::Check {
            meeting: Arc::clone(&meeting),
            reply: tx.clone(),
        };
        match app.send_control(job, until).await {
            Ok(t) => tickets.extend(t),
            Err(e) => return e.into_response(),
        }
    }
    drop(tx);
    // The meeting's own wait, and a little for the answers.
    let answers_by = until + DEBUG_WAIT + Duration::from_secs(1);
    let mut workers = Vec::with_capacity(n);
    while workers.len() < n {
        match tokio::time::timeout_at(answers_by.into(), rx.recv()).await {
            Ok(Some(Ok(w))) => workers.push(w),
            Ok(Some(Err(e))) => return ApiError::internal(e).into_response(),
            Ok(None) | Err(_) => {
                return ApiError::internal("a worker did not answer").into_response();
            }
        }
    }
    drop(tickets);
    workers.sort_by_key(|w: &WorkerReport| w.worker);
    workers.dedup_by_key(|w| w.worker);
    if workers.len() != n {
        return ApiError::internal("a worker took two checks").into_response();
    }
    #[derive(Serialize)]
    struct Body {
        server: &'static str,
        /// The batched server: each worker's state is read inside a
        /// control request's forward, which the batcher runs in inference
        /// mode (as it does any request that asks for no graph).
        batched: bool,
        requests: u64,
        workers: Vec<WorkerReport>,
        /// The batched server's control requests registered and not yet
        /// taken (this route's own are all taken by now): 0 unless one
        /// is on its way to a worker.
        controls_pending: usize,
    }
    let server = if app.plain { "plain" } else { "tch-scope" };
    let requests = app.requests.load(Ordering::Relaxed);
    let controls_pending = app.batched.as_ref().map_or(0, |b| b.controls.pending());
    json_response(
        StatusCode::OK,
        &Body {
            server,
            batched: app.batched.is_some(),
            requests,
            workers,
            controls_pending,
        },
    )
}

pub(crate) async fn pause(State(app): State<Arc<App>>) -> Response {
    let Ok(_turn) = tokio::time::timeout(DEBUG_WAIT, app.debug_turn.lock()).await else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "another debug request is running",
        )
        .into_response();
    };
    let gate = Arc::new(Gate::default());
    {
        let mut paused = app.paused.lock().unwrap_or_else(|p| p.into_inner());
        // Under the lock `stop` takes: a pause never starts after it.
        if app.stopping.load(Ordering::SeqCst) {
            return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "stopping").into_response();
        }
        if paused.is_some() {
            return ApiError::new(StatusCode::CONFLICT, "already paused").into_response();
        }
        *paused = Some(Arc::clone(&gate));
    }
    let n = app.worker_count();
    let until = Instant::now() + DEBUG_WAIT;
    let mut sent = Ok(());
    for _ in 0..n {
        match app.send_control(Job::Pause(Arc::clone(&gate)), until).await {
            // Kept until the worker is let go.
            Ok(Some(ticket)) => drop(tokio::spawn(ticket)),
            Ok(None) => {}
            Err(e) => {
                sent = Err(e);
                break;
            }
        }
    }
    while sent.is_ok() && gate.held() < n && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    if sent.is_ok() && gate.held() >= n {
        return json_response(StatusCode::OK, &serde_json::json!({ "paused": n }));
    }
    // Not all held: let go of those that are.
    let mut paused = app.paused.lock().unwrap_or_else(|p| p.into_inner());
    if paused.as_ref().is_some_and(|g| Arc::ptr_eq(g, &gate)) {
        *paused = None;
    }
    gate.open();
    match sent {
        Err(e) => e.into_response(),
        Ok(()) => ApiError::internal("the workers did not all stop").into_response(),
    }
}

pub(crate) async fn resume(State(app): State<Arc<App>>) -> Response {
    match app.paused.lock().unwrap_or_else(|p| p.into_inner()).take() {
        Some(gate) => {
            gate.open();
            json_response(
                StatusCode::OK,
                &serde_json::json!({ "resumed": app.worker_count() }),
            )
        }
        None => ApiError::new(StatusCode::CONFLICT, "not paused").into_response(),
    }
}
