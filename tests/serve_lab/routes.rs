//! The router, and `POST /predict`: its two handlers (tch-scope's, an
//! attributed `async fn`, and the plain one, timed by hand) and the route
//! that answers for both.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use tch_scope::{Context, scope};

use crate::answers::{ApiError, CatchUnwind, error_response, json_response};
use crate::app::App;
use crate::debug_headers::{Fault, debug_fault, debug_grad};
use crate::pool::Ticket;
use crate::requests::{Output, budget, is_json, read_input};
use crate::{debug_routes, health, prometheus};

/// The routes over `app`: `/predict`, `/metrics`, `/healthz`, `/readyz`,
/// and with `debug` (`--debug`) the `/debug` ones.
pub(crate) fn router(app: &Arc<App>, debug: bool) -> Router {
    let mut router = Router::new()
        .route("/predict", post(predict_route))
        .route("/metrics", get(prometheus::route))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz));
    if debug {
        router = router
            .route("/debug/workers", get(debug_routes::workers))
            .route("/debug/pause", post(debug_routes::pause))
            .route("/debug/resume", post(debug_routes::resume));
    }
    // The body limit is ours (400 with a message), not axum's 413.
    router
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(Arc::clone(app))
}

/// The tch-scope handler: its scopes are entered around every poll; the
/// context it captures carries inference mode and the deadline (counted
/// from the arrival, so queued time counts) to the worker. `grad`
/// (`x-debug-grad: on`, `--debug` only) captures it with grad mode on and
/// inference mode off instead: another scope state, never batched with
/// the default one.
#[scope(
    inference_mode,
    timed("serve::predict"),
    deadline(until = arrival + budget)
)]
async fn predict(
    app: &App,
    arrival: Instant,
    budget: Duration,
    body: Body,
    fault: Option<Fault>,
    grad: bool,
) -> Result<Output, ApiError> {
    let input = read_input(body, app.body_limit, app.body_timeout).await?;
    let ctx = if grad {
        tch_scope::scoped!(inference_mode(false), enable_grad => Context::capture())
    } else {
        Context::capture()
    };
    match &app.batched {
        Some(b) => b.predict(ctx, arrival + budget, input, fault, grad).await,
        None => app.run(Ticket::Scoped(ctx), input, fault).await,
    }
}

/// The plain handler: the same, timed by hand.
async fn predict_plain_handler(
    app: &App,
    arrival: Instant,
    budget: Duration,
    body: Body,
    fault: Option<Fault>,
) -> Result<Output, ApiError> {
    let start = Instant::now();
    let r = async {
        let input = read_input(body, app.body_limit, app.body_timeout).await?;
        app.run(Ticket::Plain(arrival + budget), input, fault).await
    }
    .await;
    let outcome = if r.is_ok() { "ok" } else { "failed" };
    metrics::histogram!("serve_plain_predict_seconds", "outcome" => outcome)
        .record(start.elapsed().as_secs_f64());
    r
}

async fn answer(
    app: &App,
    arrival: Instant,
    headers: &HeaderMap,
    body: Body,
) -> Result<Output, ApiError> {
    if !is_json(headers) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the body must be JSON (content-type: application/json)",
        ));
    }
    let b = budget(headers, app.default_deadline)?;
    let (fault, grad) = if app.debug {
        (debug_fault(headers)?, debug_grad(headers)?)
    } else {
        (None, false)
    };
    if app.plain {
        if grad {
            return Err(ApiError::bad_request(
                "x-debug-grad: on needs the tch-scope server (--plain captures no scopes)",
            ));
        }
        predict_plain_handler(app, arrival, b, body, fault).await
    } else {
        predict(app, arrival, b, body, fault, grad).await
    }
}

async fn predict_route(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let arrival = Instant::now();
    let id = app.request_id();
    let r = CatchUnwind(Box::pin(answer(&app, arrival, &headers, body)))
        .await
        .unwrap_or_else(|message| Err(ApiError::panicked("the handler", message)));
    let mut response = match r {
        Ok(out) => {
            let mut response = json_response(StatusCode::OK, &out);
            if let Some(ran) = out.ran {
                ran.headers(response.headers_mut());
            }
            response
        }
        Err(e) => {
            if let Some(detail) = &e.detail {
                eprintln!("serve: request {id}: {detail}");
            }
            error_response(&e, Some(&id))
        }
    };
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", v);
    }
    let status = response.status().as_str().to_string();
    metrics::counter!("http_requests_total", "path" => "/predict", "status" => status).increment(1);
    metrics::histogram!("http_request_duration_seconds", "path" => "/predict")
        .record(arrival.elapsed().as_secs_f64());
    metrics::gauge!("serve_queue_depth").set(app.queue_depth() as f64);
    response
}
