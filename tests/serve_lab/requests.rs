//! A `/predict` request: its JSON body read (within the body limit and
//! timeout) and checked, its budget, and the answer's body.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::answers::ApiError;
use crate::debug_headers::Ran;
use crate::flags::MAX_BUDGET_MS;
use crate::floats;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest<'a> {
    shape: Vec<i64>,
    #[serde(borrow)]
    data: &'a RawValue,
}

/// A checked request: `data.len()` is the product of `shape`.
pub(crate) struct Input {
    pub(crate) shape: Vec<i64>,
    pub(crate) data: Vec<f32>,
}

#[derive(Serialize)]
pub(crate) struct Output {
    pub(crate) shape: Vec<i64>,
    pub(crate) data: Vec<f32>,
    /// The batched server with `--debug`: what the forward ran in (the
    /// `x-debug-batch`, `x-debug-grad-mode` and `x-debug-inference-mode`
    /// answer headers, not the body).
    #[serde(skip)]
    pub(crate) ran: Option<Ran>,
}

/// `application/json` or `application/…+json`, parameters allowed.
pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    let Some(v) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = v
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Reads the body (at most `limit` bytes, within `timeout`) and checks it.
pub(crate) async fn read_input(
    body: Body,
    limit: usize,
    timeout: Duration,
) -> Result<Input, ApiError> {
    let read = tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await;
    let bytes = read
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s",
                    timeout.as_secs_f64()
                ),
            )
        })?
        .map_err(|e| {
            let over = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if over {
                ApiError::bad_request(format!("request body over the limit of {limit} bytes"))
            } else {
                ApiError::bad_request(format!("cannot read the request body: {e}"))
            }
        })?;
    parse_input(&bytes)
}

fn parse_input(bytes: &[u8]) -> Result<Input, ApiError> {
    let raw: RawRequest<'_> = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("bad JSON: {e}")))?;
    let data = floats::parse_f32_array(raw.data.get()).map_err(ApiError::bad_request)?;
    let mut n: i64 = 1;
    for (i, &d) in raw.shape.iter().enumerate() {
        if d < 0 {
            return Err(ApiError::bad_request(format!(
                "shape[{i}] = {d} is negative"
            )));
        }
        n = n
            .checked_mul(d)
            .ok_or_else(|| ApiError::bad_request("the product of `shape` overflows"))?;
    }
    if usize::try_from(n).ok() != Some(data.len()) {
        return Err(ApiError::bad_request(format!(
            "`data` has {} values, `shape` {:?} needs {n}",
            data.len(),
            raw.shape
        )));
    }
    Ok(Input {
        shape: raw.shape,
        data,
    })
}

/// The request's budget from its arrival: `x-deadline-ms`, or the default.
pub(crate) fn budget(headers: &HeaderMap, default: Duration) -> Result<Duration, ApiError> {
    let Some(v) = headers.get("x-deadline-ms") else {
        return Ok(default);
    };
    v.to_str()
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        // At most a day: `arrival + budget` stays far from overflowing.
        .map(|ms| Duration::from_millis(ms.min(MAX_BUDGET_MS)))
        .ok_or_else(|| {
            ApiError::bad_request("x-deadline-ms must be a whole number of milliseconds")
        })
}
