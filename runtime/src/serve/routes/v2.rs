//! The Open Inference Protocol's model routes: metadata, readiness and
//! `infer`, with and without a version in the path.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;

use super::{App, capture_until, error, header_budget, read_body, respond};
use crate::serve::engine::{batch_message, batch_status};
use crate::serve::health::not_ready;
use crate::serve::oip::{
    HEADER_LENGTH, InferRequest, OipError, encode_response, parse_header_length,
};

/// An error of the protocol, as its answer.
fn oip_error(app: &App, route: &'static str, e: &OipError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    respond(app, route, status, "application/json", e.body())
}

/// `GET /v2`: the server's metadata.
pub(super) async fn server_metadata(State(app): State<Arc<App>>) -> Response {
    let body = serde_json::json!({
        "name": "tch-scope",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": ["binary_tensor_data"],
    });
    respond(
        &app,
        "v2",
        StatusCode::OK,
        "application/json",
        body.to_string().into_bytes(),
    )
}

fn metadata(app: &App, name: &str, version: Option<&str>) -> Response {
    match app.meta.check_model(name, version) {
        Ok(()) => respond(
            app,
            "model_metadata",
            StatusCode::OK,
            "application/json",
            app.meta.to_json(),
        ),
        Err(e) => oip_error(app, "model_metadata", &e),
    }
}

/// `GET /v2/models/{name}`: the model's metadata, 404 for another name.
pub(super) async fn model_metadata(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
) -> Response {
    metadata(&app, &name, None)
}

/// `GET /v2/models/{name}/versions/{version}`.
pub(super) async fn model_metadata_version(
    State(app): State<Arc<App>>,
    Path((name, version)): Path<(String, String)>,
) -> Response {
    metadata(&app, &name, Some(&version))
}

fn ready(app: &App, name: &str, version: Option<&str>) -> Response {
    if let Err(e) = app.meta.check_model(name, version) {
        return oip_error(app, "model_ready", &e);
    }
    match not_ready(app) {
        None => respond(
            app,
            "model_ready",
            StatusCode::OK,
            "application/json",
            b"{}".to_vec(),
        ),
        Some(why) => error(app, "model_ready", StatusCode::SERVICE_UNAVAILABLE, &why),
    }
}

/// `GET /v2/models/{name}/ready`: 200 when ready, 503 when not, 404 for
/// another name.
pub(super) async fn model_ready(State(app): State<Arc<App>>, Path(name): Path<String>) -> Response {
    ready(&app, &name, None)
}

/// `GET /v2/models/{name}/versions/{version}/ready`.
pub(super) async fn model_ready_version(
    State(app): State<Arc<App>>,
    Path((name, version)): Path<(String, String)>,
) -> Response {
    ready(&app, &name, Some(&version))
}

/// `POST /v2/models/{name}/infer`.
pub(super) async fn infer(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer(&app, &name, None, &headers, body).await
}

/// `POST /v2/models/{name}/versions/{version}/infer`.
pub(super) async fn infer_version(
    State(app): State<Arc<App>>,
    Path((name, version)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer(&app, &name, Some(&version), &headers, body).await
}

/// What `infer` failed with: the protocol's error, or a status and a
/// message.
enum Failure {
    Oip(OipError),
    Status(StatusCode, String),
}

impl From<OipError> for Failure {
    fn from(e: OipError) -> Self {
        Self::Oip(e)
    }
}

async fn answer(
    app: &App,
    name: &str,
    version: Option<&str>,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let arrival = Instant::now();
    match run(app, name, version, headers, body, arrival).await {
        Ok(r) => r,
        Err(Failure::Oip(e)) => oip_error(app, "infer", &e),
        Err(Failure::Status(status, message)) => error(app, "infer", status, &message),
    }
}

/// Checks the model's name, reads and checks the request, computes it in
/// the batcher by its deadline, and encodes the answer as it was asked for.
async fn run(
    app: &App,
    name: &str,
    version: Option<&str>,
    headers: &HeaderMap,
    body: Body,
    arrival: Instant,
) -> Result<Response, Failure> {
    app.meta.check_model(name, version)?;
    let bad = |m: String| Failure::Status(StatusCode::BAD_REQUEST, m);
    let header_length = headers
        .get(HEADER_LENGTH)
        .map(|v| parse_header_length(v.as_bytes()))
        .transpose()?;
    let header = header_budget(headers).map_err(bad)?;
    let bytes = read_body(app, body)
        .await
        .map_err(|(status, m)| Failure::Status(status, m))?;
    let mut request = InferRequest::parse(&bytes, header_length)?;
    drop(bytes);
    let inputs = app.meta.take_inputs(&mut request)?;
    let budget = match (request.timeout, header) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let deadline = app.deadline(arrival, budget);
    // Captured here, on a runtime thread (see `capture_until`).
    let ctx = capture_until(deadline).map_err(|(status, m)| Failure::Status(status, m))?;
    let outputs = app
        .engine
        .submit(ctx, inputs, Some(deadline))
        .await
        .map_err(|e| {
            let status =
                StatusCode::from_u16(batch_status(&e)).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            Failure::Status(status, batch_message(&e))
        })?;
    let encoded = encode_response(&app.meta, &request, &outputs)?;
    let content_type = encoded.content_type();
    let mut r = respond(app, "infer", StatusCode::OK, content_type, encoded.body);
    if let Some(n) = encoded.header_length {
        r.headers_mut().insert(HEADER_LENGTH, HeaderValue::from(n));
    }
    Ok(r)
}
