//! Health: the protocol's `GET /v2/health/live` and `/v2/health/ready`, and
//! the operator's `GET /healthz` and `/readyz`.
//!
//! Live: some batcher worker is running (with none left, every request
//! would be answered 503). Ready: live, and the server is not stopping (the
//! model was warmed up before the server listened).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::routes::{App, error, respond};

/// Why the server is not live, if it is not.
fn not_live(app: &App) -> Option<String> {
    (app.engine.live_workers() == 0).then(|| "every batcher worker has ended".to_owned())
}

/// Why the server is not ready, if it is not.
pub(crate) fn not_ready(app: &App) -> Option<String> {
    not_live(app).or_else(|| {
        app.stopping
            .load(Ordering::SeqCst)
            .then(|| "the server is shutting down".to_owned())
    })
}

fn answer(app: &App, route: &'static str, why: Option<String>) -> Response {
    match why {
        None => respond(
            app,
            route,
            StatusCode::OK,
            "application/json",
            b"{}".to_vec(),
        ),
        Some(why) => error(app, route, StatusCode::SERVICE_UNAVAILABLE, &why),
    }
}

/// `GET /v2/health/live`: 200, or 503 with the reason.
pub(crate) async fn live(State(app): State<Arc<App>>) -> Response {
    let why = not_live(&app);
    answer(&app, "health", why)
}

/// `GET /v2/health/ready`: 200, or 503 with the reason.
pub(crate) async fn ready(State(app): State<Arc<App>>) -> Response {
    let why = not_ready(&app);
    answer(&app, "health", why)
}

/// `GET /healthz`: as `/v2/health/live`.
pub(crate) async fn healthz(State(app): State<Arc<App>>) -> Response {
    let why = not_live(&app);
    answer(&app, "healthz", why)
}

/// `GET /readyz`: as `/v2/health/ready`.
pub(crate) async fn readyz(State(app): State<Arc<App>>) -> Response {
    let why = not_ready(&app);
    answer(&app, "readyz", why)
}
