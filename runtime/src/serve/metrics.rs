//! The server's own counters and their Prometheus text (`GET /metrics`).
//!
//! Kept here rather than in the `metrics` facade so that `/metrics` answers
//! with no exporter installed; the batcher's own facade metrics (crate
//! feature `metrics`) go wherever the application sends them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::batch::BatchStats;

/// Why the server closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// No request and no byte for the idle timeout.
    Idle,
    /// A request head begun and not finished within the header timeout.
    Header,
    /// An answer made no write progress for the write timeout.
    Write,
}

impl Closed {
    /// Its `reason` label.
    fn label(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Header => "header_timeout",
            Self::Write => "write_timeout",
        }
    }
}

/// What the server counts.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Answers by route and status.
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    accepted: AtomicU64,
    open: AtomicU64,
    idle: AtomicU64,
    header: AtomicU64,
    write: AtomicU64,
}

impl Counters {
    pub(crate) fn answered(&self, route: &'static str, status: u16) {
        let mut m = self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *m.entry((route, status)).or_default() += 1;
    }

    pub(crate) fn opened(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.open.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn ended(&self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn closed(&self, why: Closed) {
        let c = match why {
            Closed::Idle => &self.idle,
            Closed::Header => &self.header,
            Closed::Write => &self.write,
        };
        c.fetch_add(1, Ordering::Relaxed);
        // Also to the `metrics` facade, for a program that exports its own
        // (one with its own accept loop over `serve_connection`).
        #[cfg(feature = "metrics")]
        metrics::counter!("serve_connections_closed_total", "reason" => why.label()).increment(1);
    }

    /// The Prometheus text exposition of these counters and of the
    /// batcher's `stats`, with `live` of its workers running.
    pub(crate) fn render(
        &self,
        model: &str,
        stats: &BatchStats,
        queued: usize,
        live: usize,
    ) -> String {
        let mut s = String::from(
            "# HELP serve_requests_total Requests answered, by route and status.\n\
             # TYPE serve_requests_total counter\n",
        );
        {
            let m = self
                .requests
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for ((route, status), n) in m.iter() {
                let _ = writeln!(
                    s,
                    "serve_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
                );
            }
        }
        let mut one = |name: &str, kind: &str, help: &str, labels: &str, v: u64| {
            let _ = writeln!(
                s,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{labels} {v}"
            );
        };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        one(
            "serve_connections_accepted_total",
            "counter",
            "Connections accepted.",
            "",
            load(&self.accepted),
        );
        one(
            "serve_connections_open",
            "gauge",
            "Connections open now.",
            "",
            load(&self.open),
        );
        let model = model.replace(['\\', '"', '\n'], "_");
        let labels = format!("{{model=\"{model}\"}}");
        one(
            "serve_batch_submitted_total",
            "counter",
            "Requests queued for the model (refused ones are not).",
            &labels,
            stats.submitted,
        );
        one(
            "serve_batch_inferences_total",
            "counter",
            "Requests computed (Triton's inference count).",
            &labels,
            stats.inferences,
        );
        one(
            "serve_batch_executions_total",
            "counter",
            "Forwards run (Triton's execution count); inferences / executions is the mean batch size.",
            &labels,
            stats.executions,
        );
        one(
            "serve_batch_expired_total",
            "counter",
            "Requests whose deadline passed before they were computed.",
            &labels,
            stats.expired,
        );
        one(
            "serve_batch_cancelled_total",
            "counter",
            "Requests whose client left before they were computed; never computed.",
            &labels,
            stats.cancelled,
        );
        one(
            "serve_batch_failed_total",
            "counter",
            "Requests answered with an error of their own forward (the model refused the input, a deadline ended it, a panic).",
            &labels,
            stats.failed,
        );
        one(
            "serve_batch_split_total",
            "counter",
            "Batches that failed and whose requests then ran one by one.",
            &labels,
            stats.split_batches,
        );
        one(
            "serve_batch_largest",
            "gauge",
            "The most requests one successful forward computed so far.",
            &labels,
            stats.largest_batch,
        );
        one(
            "serve_batch_refused_total",
            "counter",
            "Requests refused at submission (queue full or no worker).",
            &labels,
            stats.refused,
        );
        one(
            "serve_batch_queued",
            "gauge",
            "Requests waiting for a worker.",
            &labels,
            queued as u64,
        );
        one(
            "serve_batch_workers_live",
            "gauge",
            "Batcher worker threads running.",
            &labels,
            live as u64,
        );
        let _ = writeln!(
            s,
            "# HELP serve_connections_closed_total Connections the server closed, by reason.\n\
             # TYPE serve_connections_closed_total counter"
        );
        for (reason, c) in [
            (Closed::Idle.label(), &self.idle),
            (Closed::Header.label(), &self.header),
            (Closed::Write.label(), &self.write),
        ] {
            let _ = writeln!(
                s,
                "serve_connections_closed_total{{reason=\"{reason}\"}} {}",
                load(c)
            );
        }
        s
    }
}
