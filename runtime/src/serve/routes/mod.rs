//! The routes: the Open Inference Protocol's ([`v2`]), the plain JSON
//! `POST /predict` ([`predict`]), health ([`super::health`]) and
//! `GET /metrics`; the state they share ([`App`]).

mod predict;
mod v2;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};

use super::engine::Engine;
use super::health;
use super::metrics::Counters;
use super::oip::ModelMetadata;
use crate::{Context, Deadline};

/// The longest budget a request may ask for (a day).
const MAX_BUDGET: Duration = Duration::from_secs(86_400);

/// What every route reads.
#[derive(Debug)]
pub(crate) struct App {
    pub(crate) meta: ModelMetadata,
    pub(crate) engine: Engine,
    pub(crate) counters: Arc<Counters>,
    pub(crate) body_limit: usize,
    pub(crate) body_timeout: Duration,
    pub(crate) default_deadline: Duration,
    /// Set when the server stops accepting: `/readyz` and the protocol's
    /// ready routes say no from then on.
    pub(crate) stopping: AtomicBool,
}

impl App {
    pub(crate) fn new(
        meta: ModelMetadata,
        engine: Engine,
        counters: Arc<Counters>,
        body_limit: usize,
        body_timeout: Duration,
        default_deadline: Duration,
    ) -> Self {
        Self {
            meta,
            engine,
            counters,
            body_limit,
            body_timeout,
            default_deadline,
            stopping: AtomicBool::new(false),
        }
    }

    /// A request's deadline: its own budget (`timeout` parameter or
    /// `x-deadline-ms`, the shorter) or the default, from `arrival`.
    pub(crate) fn deadline(&self, arrival: Instant, budget: Option<Duration>) -> Instant {
        arrival + budget.unwrap_or(self.default_deadline).min(MAX_BUDGET)
    }
}

/// Every route, on `app`; every answer carries an `x-request-id`.
pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/predict", post(predict::predict))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(Arc::clone(&app))
        .merge(oip_router(app))
        .layer(middleware::from_fn(request_id))
}

/// The answer's `x-request-id` header.
pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest `x-request-id` a client may give (a longer one is replaced).
const MAX_REQUEST_ID: usize = 128;

/// Gives the request an id, in its extensions ([`RequestId`]) and on its
/// answer's `x-request-id` header: the client's own `x-request-id` when
/// it sent one of at most 128 visible ASCII characters (so that a proxy's
/// id follows the request through), else a process-unique one (the pid in
/// hex, then a counter).
async fn request_id(mut req: Request, next: Next) -> Response {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let given = req.headers().get(&REQUEST_ID).filter(|v| {
        let b = v.as_bytes();
        !b.is_empty() && b.len() <= MAX_REQUEST_ID && b.iter().all(u8::is_ascii_graphic)
    });
    let id = match given {
        Some(v) => v.clone(),
        None => {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            HeaderValue::from_str(&format!("{:x}-{n}", std::process::id()))
                .unwrap_or_else(|_| HeaderValue::from_static("0"))
        }
    };
    req.extensions_mut().insert(RequestId(id.clone()));
    let mut r = next.run(req).await;
    r.headers_mut().insert(REQUEST_ID, id);
    r
}

/// A request's id (see [`request_id`]), in its extensions.
#[derive(Debug, Clone)]
pub(crate) struct RequestId(pub(crate) HeaderValue);

/// The Open Inference Protocol's routes, on `app`.
pub(crate) fn oip_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v2", get(v2::server_metadata))
        .route("/v2/health/live", get(health::live))
        .route("/v2/health/ready", get(health::ready))
        .route("/v2/models/{name}", get(v2::model_metadata))
        .route("/v2/models/{name}/ready", get(v2::model_ready))
        .route("/v2/models/{name}/infer", post(v2::infer))
        .route(
            "/v2/models/{name}/versions/{version}",
            get(v2::model_metadata_version),
        )
        .route(
            "/v2/models/{name}/versions/{version}/ready",
            get(v2::model_ready_version),
        )
        .route(
            "/v2/models/{name}/versions/{version}/infer",
            post(v2::infer_version),
        )
        // The body limit is ours (a 400 with a message), not axum's 413.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(app)
}

/// `GET /metrics`: Prometheus text.
async fn metrics(State(app): State<Arc<App>>) -> Response {
    let e = &app.engine;
    let text = app
        .counters
        .render(&app.meta.name, &e.stats(), e.queued(), e.live_workers());
    respond(
        &app,
        "metrics",
        StatusCode::OK,
        "text/plain; version=0.0.4",
        text.into_bytes(),
    )
}

/// Any other path: the protocol's 404.
async fn not_found(State(app): State<Arc<App>>) -> Response {
    error(&app, "other", StatusCode::NOT_FOUND, "no such route")
}

/// A response, counted under `route`.
pub(crate) fn respond(
    app: &App,
    route: &'static str,
    status: StatusCode,
    content_type: &'static str,
    body: Vec<u8>,
) -> Response {
    app.counters.answered(route, status.as_u16());
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// `{"error": message}` with `status`, counted under `route`.
pub(crate) fn error(app: &App, route: &'static str, status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message })
        .to_string()
        .into_bytes();
    respond(app, route, status, "application/json", body)
}

/// The request's context, captured on this (runtime) thread: no scope
/// open but a deadline at `deadline`, so that the batcher computes it in
/// inference mode, batched with the others, and its deadline ends its
/// forward (an operator past it is refused: the request's 504) instead of
/// letting it run on.
///
/// # Errors
/// A 500 when the deadline scope cannot be entered (another library holds
/// the dispatch key it needs).
pub(crate) fn capture_until(deadline: Instant) -> Result<Context, (StatusCode, String)> {
    Deadline::until(deadline)
        .run(Context::capture)
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// The `x-deadline-ms` header's budget: `None` without one.
///
/// # Errors
/// A message for a value that is not a whole number of milliseconds.
pub(crate) fn header_budget(headers: &HeaderMap) -> Result<Option<Duration>, String> {
    let Some(v) = headers.get("x-deadline-ms") else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(|ms| Some(Duration::from_millis(ms)))
        .ok_or_else(|| {
            format!(
                "x-deadline-ms must be a whole number of milliseconds, not {:?}",
                String::from_utf8_lossy(v.as_bytes())
            )
        })
}

/// The body, up to the app's limit, within its body timeout.
///
/// # Errors
/// A 408 when it does not arrive in time; a 400 when it is larger than the
/// limit or cannot be read.
pub(crate) async fn read_body(
    app: &App,
    body: Body,
) -> Result<axum::body::Bytes, (StatusCode, String)> {
    let read = axum::body::to_bytes(body, app.body_limit);
    match tokio::time::timeout(app.body_timeout, read).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => Err((
            StatusCode::BAD_REQUEST,
            format!(
                "cannot read the request body (at most {} bytes): {e}",
                app.body_limit
            ),
        )),
        Err(_) => Err((
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} s",
                app.body_timeout.as_secs_f64()
            ),
        )),
    }
}
