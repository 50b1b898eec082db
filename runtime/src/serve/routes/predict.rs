//! `POST /predict`: the plain JSON route, `{"shape": [n, …], "data": [f32,
//! …]}` (row-major) in and out, for a model of one `FP32` input; its first
//! output is the answer. The request's budget is its `x-deadline-ms`
//! header.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use tch::{Kind, Tensor};

use super::{App, error, header_budget, read_body, respond};
use crate::Context;
use crate::serve::engine::batch_status;
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
    headers: HeaderMap,
    body: Body,
) -> Response {
    let arrival = Instant::now();
    match run(&app, &headers, body, arrival).await {
        Ok(out) => {
            let body = serde_json::to_vec(&out).unwrap_or_default();
            respond(&app, ROUTE, StatusCode::OK, "application/json", body)
        }
        Err((status, message)) => error(&app, ROUTE, status, &message),
    }
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
        return Err(bad(format!(
            "shape {:?} needs {count:?} values, data has {}",
            input.shape,
            input.data.len()
        )));
    }
    let x = Tensor::from_slice(&input.data).reshape(&input.shape);
    let deadline = app.deadline(arrival, budget);
    let ys = app
        .engine
        .submit(Context::capture(), vec![x], Some(deadline))
        .await
        .map_err(|e| {
            let status =
                StatusCode::from_u16(batch_status(&e)).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, e.to_string())
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
    Ok(Output {
        shape: y.size(),
        data,
    })
}
