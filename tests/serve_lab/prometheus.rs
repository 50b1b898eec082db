//! `GET /metrics`: the Prometheus recorder, its metrics described, and the
//! route that renders them.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tch_scope::batch;

use crate::app::App;

pub(crate) fn install() -> Result<PrometheusHandle, String> {
    let buckets = [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ];
    let handle = PrometheusBuilder::new()
        .set_buckets(&buckets)
        .and_then(|b| b.install_recorder())
        .map_err(|e| format!("cannot install the Prometheus recorder: {e}"))?;
    metrics::describe_counter!(
        "http_requests_total",
        "HTTP requests answered, by path and status."
    );
    metrics::describe_histogram!(
        "http_request_duration_seconds",
        metrics::Unit::Seconds,
        "Time from a request's arrival to its response."
    );
    metrics::describe_gauge!("serve_queue_depth", "Jobs waiting for a model worker.");
    metrics::describe_histogram!(
        "serve_plain_predict_seconds",
        metrics::Unit::Seconds,
        "The plain server's predict handler, timed by hand."
    );
    metrics::describe_gauge!("serve_connections_open", "Client connections open.");
    metrics::describe_gauge!(
        "serve_batch_largest",
        "The most requests one forward computed (the batched server)."
    );
    metrics::describe_gauge!(
        "serve_batch_split",
        "Batches that failed and ran again request by request (the batched server)."
    );
    metrics::describe_counter!(
        "serve_connections_closed_total",
        "Connections the server closed, by reason (idle, header_timeout)."
    );
    metrics::describe_counter!(
        "serve_jobs_skipped_total",
        "Queued requests dropped before the model ran, by reason."
    );
    tch_scope::report::describe_metrics();
    batch::describe_metrics();
    Ok(handle)
}

pub(crate) async fn route(State(app): State<Arc<App>>) -> Response {
    let open = app.max_connections as usize - app.connections.available_permits();
    metrics::gauge!("serve_connections_open").set(open as f64);
    metrics::gauge!("serve_queue_depth").set(app.queue_depth() as f64);
    if let Some(b) = &app.batched {
        let stats = b.engine.stats();
        metrics::gauge!("serve_batch_largest").set(stats.largest_batch as f64);
        metrics::gauge!("serve_batch_split").set(stats.split_batches as f64);
    }
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        app.metrics.render(),
    )
        .into_response()
}
