//! The answers other than 200: [`ApiError`] and its JSON body, the 503s
//! that several paths give, and a handler's panic caught into a 500.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::Poll;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tch_scope::ScopeError;

/// A response other than 200: its status and `{"error": message}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    /// For the server's log only (a panic's message): the client gets the
    /// request id instead, since a panic message may say anything.
    pub(crate) detail: Option<String>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            detail: None,
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// 500; the message goes to the log with the request id, not to the
    /// client.
    pub(crate) fn panicked(what: &str, message: String) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!(
                "internal error: {what} panicked (the server's log has it under this request id)"
            ),
            detail: Some(format!("{what} panicked: {message}")),
        }
    }
}

/// A scope of the handler that cannot be entered (500), or its deadline,
/// which ended the request (504).
impl From<ScopeError> for ApiError {
    fn from(e: ScopeError) -> Self {
        let status = if e.is_ended() {
            StatusCode::GATEWAY_TIMEOUT
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        Self::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error_response(&self, None)
    }
}

/// 503: no worker is left to run the model (every one ended).
pub(crate) fn no_worker() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "no model worker is running (every worker ended; /healthz says so)",
    )
}

/// 503: `limit` (`--queue`) requests already wait for a worker.
pub(crate) fn queue_full(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("the queue is full ({limit} requests waiting)"),
    )
}

/// 503 for a debug route whose job found no room in the queue in time.
pub(crate) fn queue_stayed_full() -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the queue stayed full")
}

/// `{"error": …}`, with `"request_id"` where the route gives requests one.
pub(crate) fn error_response(e: &ApiError, request_id: Option<&str>) -> Response {
    #[derive(Serialize)]
    struct Body<'a> {
        error: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        request_id: Option<&'a str>,
    }
    json_response(
        e.status,
        &Body {
            error: &e.message,
            request_id,
        },
    )
}

pub(crate) fn json_response(status: StatusCode, value: &impl Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            bytes,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_else(|| "a panic".into())
}

/// A future whose panic becomes an `Err`, so that a handler's panic is
/// answered (500 with the request id) rather than dropping the
/// connection without a word.
pub(crate) struct CatchUnwind<F>(pub(crate) Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let f = self.0.as_mut();
        match catch_unwind(AssertUnwindSafe(|| f.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(p) => Poll::Ready(Err(panic_message(&*p))),
        }
    }
}
