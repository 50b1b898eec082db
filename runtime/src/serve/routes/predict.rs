//! `POST /predict`: the plain JSON route, `{"shape": [n, …], "data": [f32,
//! …]}` (row-major, `content-type: application/json`) in and out, for a
//! model of one `FP32` input; its first output is the answer. The
//! request's budget is its `x-deadline-ms` header. An error is
//! `{"error": "…", "request_id": "…"}` (the id also on the answer's
//! `x-request-id`): 400 for a malformed request, 415 for a body that is
//! not JSON, 422 for an input the model refuses, 500 for a failure of the
//! server's (an output that is not finite: JSON has no NaN), 503 and 504
//! as for the protocol.

use std::sync::Arc;
use std::time::Instant;

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use super::{App, RequestId, capture_until, header_budget, read_body, respond};
use crate::serve::engine::{batch_message, batch_status};
use crate::serve::oip::Datatype;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    shape: Vec<i64>,
    data: Vec<f32>,
}

#[derive(Serialize)]
struct Output {
    shape: Vec<i64>,
    data: Vec<f32>,
}

const ROUTE: &str = "predict";

/// `POST /predict`.
pub(super) async fn predict(
    State(app): State<Arc<App>>,
    id: Option<Extension<RequestId>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let arrival = Instant::now();
    match run(&app, &headers, body, arrival).await {
        Ok(out) => {
            let body = serde_json::to_vec(&out).unwrap_or_default();
            respond(&app, ROUTE, StatusCode::OK, "application/json", body)
        }
        Err((status, message)) => {
            let id = id
                .as_ref()
                .and_then(|Extension(RequestId(v))| v.to_str().ok());
            let body = serde_json::json!({ "error": message, "request_id": id });
            respond(
                &app,
                ROUTE,
                status,
                "application/json",
                body.to_string().into_bytes(),
            )
        }
    }
}

/// Whether the request says its body is JSON (`application/json`, any
/// parameters).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

async fn run(
    app: &App,
    headers: &HeaderMap,
    body: Body,
    arrival: Instant,
) -> Result<Output, (StatusCode, String)> {
    let bad = |m: String| (StatusCode::BAD_REQUEST, m);
    let [meta] = app.meta.inputs.as_slice() else {
        return Err(bad(format!(
            "/predict takes a model of one input; this one takes {} (use /v2/models/{}/infer)",
            app.meta.inputs.len(),
            app.meta.name
        )));
    };
    if meta.datatype != Datatype::Fp32 {
        return Err(bad(format!(
            "/predict takes FP32 data; the model's input is {} (use the /v2 routes)",
            meta.datatype.as_str()
        )));
    }
    if !is_json(headers) {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the body must be JSON (content-type: application/json)".to_owned(),
        ));
    }
    let budget = header_budget(headers).map_err(bad)?;
    let bytes = read_body(app, body).await?;
    let input: Input = serde_json::from_slice(&bytes).map_err(|e| {
        bad(format!(
            "the body is not {{\"shape\": [...], \"data\": [...]}}: {e}"
        ))
    })?;
    let fits = input.shape.len() == meta.shape.len()
        && input
            .shape
            .iter()
            .zip(&meta.shape)
            .all(|(&n, &m)| n >= 0 && (m < 0 || n == m));
    if !fits {
        return Err(bad(format!(
            "shape {:?} does not fit the model's input {:?} (-1: any size)",
            input.shape, meta.shape
        )));
    }
    let count = input
        .shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?));
    if count != Some(input.data.len()) {
        let needs = count.map_or_else(|| "more than fit in memory".to_owned(), |n| n.to_string());
        return Err(bad(format!(
            "`data` has {} values, `shape` {:?} needs {needs}",
            input.data.len(),
            input.shape,
        )));
    }
    let x = Tensor::from_slice(&input.data).reshape(&input.shape);
    let deadline = app.deadline(arrival, budget);
    let ctx = capture_until(deadline)?;
    let ys = app
        .engine
        .submit(ctx, vec![x], Some(deadline))
        .await
        .map_err(|e| {
            let status =
                StatusCode::from_u16(batch_status(&e)).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, batch_message(&e))
        })?;
    let internal = |m: String| (StatusCode::INTERNAL_SERVER_ERROR, m);
    let y = ys
        .first()
        .ok_or_else(|| internal("the model returned no output".to_owned()))?;
    let y = y
        .f_to_kind(Kind::Float)
        .and_then(|y| y.f_contiguous())
        .map_err(|e| internal(format!("cannot read the output: {e}")))?;
    let data = Vec::<f32>::try_from(&y.flatten(0, -1))
        .map_err(|e| internal(format!("cannot read the output: {e}")))?;
    // JSON has no NaN or infinity: a `null` in a 200 would look like an
    // answer.
    if let Some(i) = data.iter().position(|v| !v.is_finite()) {
        return Err(internal(format!(
            "the model's output is not finite (data[{i}] = {})",
            data[i]
        )));
    }
    Ok(Output {
        shape: y.size(),
        data,
    })
}
