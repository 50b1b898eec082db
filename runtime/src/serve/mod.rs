//! The serving library: a model behind HTTP, over the Open Inference
//! Protocol (KServe v2, as Triton, KServe, MLServer and `tritonclient`
//! speak it) and a plain JSON route, batched.
//!
//! Compiled with the crate's `serve` feature (axum, hyper and tokio come
//! with it, and only with it). An [`Engine`] is the model behind a
//! [`Batcher`](crate::batch::Batcher) (a TorchScript file, an AOTInductor
//! `.pt2`, or any batcher: a model trained in Rust, in
//! [`Replicas`](crate::Replicas)); a [`Server`] serves it:
//!
//! ```no_run
//! use tch_scope::batch::BatchOptions;
//! use tch_scope::serve::{Engine, Server, model_name, oip::Datatype};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), tch_scope::ScopeError> {
//!     let path = "mlp.pt";
//!     let engine = Engine::load(path, BatchOptions::new().max_batch(32))?;
//!     Server::new(model_name(path), engine)
//!         .input(Datatype::Fp32, &[-1, 64]) // a TorchScript file declares none
//!         .run("127.0.0.1:8000".parse().unwrap())
//!         .await
//! }
//! ```
//!
//! Routes:
//! - `GET /v2/health/live`, `GET /v2/health/ready` (200, or 503 with the
//!   reason), `GET /v2` (the server's metadata);
//! - `GET /v2/models/{name}` (the model's metadata: inputs `input__0`, …
//!   and outputs `output__0`, … with datatype and shape, `-1` for the
//!   dynamic batch), `GET /v2/models/{name}/ready`,
//!   `POST /v2/models/{name}/infer` (tensors as JSON or with the binary
//!   tensor data extension, both ways; see [`oip`]), each also under
//!   `/versions/1`. Errors are `{"error": "…"}`: 400 for a wrong input
//!   name, datatype or shape, 404 for an unknown model, 503 for a full
//!   queue or no worker, 504 for a deadline passed before the forward. A
//!   request's deadline is its `timeout` parameter or its `x-deadline-ms`
//!   header (the shorter), or [`Server::default_deadline`];
//! - `POST /predict` (`{"shape", "data"}` JSON, a model of one `FP32`
//!   input), `GET /metrics` (Prometheus text), `GET /healthz`,
//!   `GET /readyz`.
//!
//! Connections: at most [`Server::max_connections`] at once, each closed
//! when its request head is slow ([`Server::header_timeout`]), when it is
//! idle ([`Server::idle_timeout`]), or when its answer makes no write
//! progress ([`Server::write_timeout`]: a client that does not read). The
//! shutdown ([`Listening::serve`] on SIGINT or SIGTERM,
//! [`Listening::serve_until`]) answers the requests in flight within
//! [`Server::shutdown_timeout`].

pub mod connections;
mod engine;
mod health;
mod metrics;
pub mod oip;
mod routes;
mod server;
mod shutdown;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_connections;

pub use engine::{Engine, PLATFORM_AOTI, PLATFORM_TCH_SCOPE, PLATFORM_TORCHSCRIPT};
pub use server::{Listening, Server};

/// A model's default name in the routes: its file's stem (`mlp` for
/// `models/mlp.pt`), or `model` for a path with none.
#[must_use]
pub fn model_name(path: impl AsRef<std::path::Path>) -> String {
    path.as_ref()
        .file_stem()
        .map_or_else(|| "model".to_owned(), |s| s.to_string_lossy().into_owned())
}
