//! The protocol's errors: a status code and an `{"error": "…"}` body.

use std::fmt;

/// What went wrong, as the status code a server answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request is malformed or does not fit the model: a wrong input
    /// name, datatype or shape, bad JSON, binary data that does not add up,
    /// an unsupported datatype or parameter. HTTP 400.
    BadRequest,
    /// The model (or version) named in the path is not served. HTTP 404.
    NotFound,
    /// The server failed on a well-formed request. HTTP 500.
    Internal,
}

impl ErrorKind {
    /// The HTTP status code of this kind: 400, 404 or 500.
    #[must_use]
    pub const fn status(self) -> u16 {
        match self {
            Self::BadRequest => 400,
            Self::NotFound => 404,
            Self::Internal => 500,
        }
    }
}

/// An error of the Open Inference Protocol: its [`ErrorKind`] (the status
/// code) and a message saying what was wrong, sent as `{"error": message}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OipError {
    kind: ErrorKind,
    message: String,
}

impl OipError {
    /// An error of `kind` with `message`.
    #[must_use]
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// A 400: the request is malformed or does not fit the model.
    #[must_use]
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadRequest, message)
    }

    /// A 404 for the model `name`, which this server does not serve.
    #[must_use]
    pub fn unknown_model(name: &str) -> Self {
        Self::new(
            ErrorKind::NotFound,
            format!("unknown model {name:?}: this server does not serve it"),
        )
    }

    /// A 500: the server failed on a well-formed request.
    #[must_use]
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// The kind of error.
    #[must_use]
    pub const fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The HTTP status code to answer with (see [`ErrorKind::status`]).
    #[must_use]
    pub const fn status(&self) -> u16 {
        self.kind.status()
    }

    /// The message, as the body's `error` field carries it.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The response body: `{"error": "…"}` as UTF-8 JSON (content type
    /// `application/json`).
    #[must_use]
    pub fn body(&self) -> Vec<u8> {
        // A map of one string cannot fail to serialize.
        serde_json::to_vec(&serde_json::json!({ "error": self.message }))
            .unwrap_or_else(|_| b"{\"error\":\"internal error\"}".to_vec())
    }

    /// The message with `context` in front (`"{context}: {message}"`).
    #[must_use]
    pub(crate) fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for OipError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.kind.status())
    }
}

impl std::error::Error for OipError {}
