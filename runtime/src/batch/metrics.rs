//! The batcher's measurements in the `metrics` facade (the `metrics`
//! feature), each labelled with the batcher's name.

use std::time::Duration;

/// Requests per executed batch (a histogram).
pub(crate) const SIZE: &str = "tch_scope_batch_size";
/// Seconds from a request's submission to the start of its batch's compute.
pub(crate) const QUEUE_SECONDS: &str = "tch_scope_batch_queue_seconds";
/// Requests dropped uncomputed because their deadline had passed.
pub(crate) const EXPIRED: &str = "tch_scope_batch_expired_total";
/// Requests dropped uncomputed because their ticket was dropped.
pub(crate) const CANCELLED: &str = "tch_scope_batch_cancelled_total";
/// Requests computed with success (Triton's inference count).
pub(crate) const INFERENCES: &str = "tch_scope_batch_inferences_total";
/// Forward runs with success (Triton's execution count).
pub(crate) const EXECUTIONS: &str = "tch_scope_batch_executions_total";

/// Gives the installed recorder the units and help texts of the batcher's
/// metrics (see [`report::describe_metrics`](crate::report::describe_metrics)
/// for tch-scope's others).
pub fn describe_metrics() {
    use ::metrics::{Unit, describe_counter, describe_histogram};
    describe_histogram!(
        SIZE,
        Unit::Count,
        "Requests per batch a tch-scope batcher computed, by batcher name."
    );
    describe_histogram!(
        QUEUE_SECONDS,
        Unit::Seconds,
        "Time from a request's submission to its batch's compute, by batcher name."
    );
    describe_counter!(
        EXPIRED,
        Unit::Count,
        "Requests dropped uncomputed because their deadline had passed."
    );
    describe_counter!(
        CANCELLED,
        Unit::Count,
        "Requests dropped uncomputed because their caller had gone."
    );
    describe_counter!(
        INFERENCES,
        Unit::Count,
        "Requests computed with success (Triton's inference count)."
    );
    describe_counter!(
        EXECUTIONS,
        Unit::Count,
        "Forward runs with success, batched or alone (Triton's execution count)."
    );
}

/// A batch about to be computed: its size and each request's wait.
pub(crate) fn batch(name: &'static str, waits: impl ExactSizeIterator<Item = Duration>) {
    ::metrics::histogram!(SIZE, "name" => name).record(waits.len() as f64);
    let h = ::metrics::histogram!(QUEUE_SECONDS, "name" => name);
    for w in waits {
        h.record(w.as_secs_f64());
    }
}

/// Requests removed before compute.
pub(crate) fn dropped(name: &'static str, expired: u64, cancelled: u64) {
    if expired > 0 {
        ::metrics::counter!(EXPIRED, "name" => name).increment(expired);
    }
    if cancelled > 0 {
        ::metrics::counter!(CANCELLED, "name" => name).increment(cancelled);
    }
}

/// One forward run that answered `inferences` requests.
pub(crate) fn executed(name: &'static str, inferences: u64) {
    ::metrics::counter!(EXECUTIONS, "name" => name).increment(1);
    ::metrics::counter!(INFERENCES, "name" => name).increment(inferences);
}
