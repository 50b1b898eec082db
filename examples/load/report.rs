//! What a run adds up to: each server's counts, latency percentiles,
//! requests/s and CPU per request, one line (or JSON line) per server, the
//! ratios between them and the goals of docs/serving.md.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::client::{self, Counts, Target};
use crate::limit;
use crate::requests::Pool;
use crate::servers::Server;
use crate::{Args, ServerKind};

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e3
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub server: String,
    /// The encoding its requests went in (`predict-json`, `v2-json`,
    /// `v2-binary`; several, `+`-joined, if its runs differed).
    pub protocol: String,
    #[serde(flatten)]
    pub counts: Counts,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub rps: f64,
    pub seconds: f64,
    /// The server's CPU time (all its processes) over the counted
    /// requests, per request; absent for a server `load` did not start.
    pub cpu_ms_per_request: Option<f64>,
    pub workers_checked: usize,
    /// The batcher workers the server reported (`serve_batch_workers_live`
    /// on its `/metrics`; absent for a server without it).
    pub server_workers: Option<usize>,
    /// Requests per forward the server formed over the counted requests
    /// (its `/metrics`; 1 for a server that does not batch).
    pub mean_batch: Option<f64>,
    /// Rows/s of the model's forward alone at that batch size
    /// (`--forward-limit`), and the share of it the server's 200s reached.
    pub forward_limit_rps: Option<f64>,
    pub of_limit: Option<f64>,
    /// `of_limit` is an upper bound (at batch 1: MLServer, whose batches
    /// are not read), printed `of_limit<=`.
    pub of_limit_at_most: bool,
    pub first_error: Option<String>,
}

/// One server's runs, added up.
#[derive(Default)]
pub struct Acc {
    counts: Counts,
    latencies: Vec<Duration>,
    elapsed: Duration,
    cpu: Option<Duration>,
    workers: usize,
    /// Requests computed and forwards run (the batcher's counters).
    batches: Option<(f64, f64)>,
    /// The batcher's workers, as its `/metrics` reported them.
    server_workers: Option<usize>,
    protocols: Vec<&'static str>,
    first_error: Option<String>,
}

impl Acc {
    pub fn summary(&mut self, server: &str) -> Summary {
        self.latencies.sort();
        Summary {
            server: server.into(),
            protocol: self.protocols.join("+"),
            counts: self.counts.clone(),
            p50_ms: percentile(&self.latencies, 0.50),
            p99_ms: percentile(&self.latencies, 0.99),
            rps: self.counts.requests as f64 / self.elapsed.as_secs_f64().max(1e-9),
            seconds: self.elapsed.as_secs_f64(),
            cpu_ms_per_request: self
                .cpu
                .map(|c| c.as_secs_f64() * 1e3 / self.counts.requests.max(1) as f64),
            workers_checked: self.workers,
            server_workers: self.server_workers,
            mean_batch: self.batches.map(|(n, b)| n / b.max(1.0)),
            forward_limit_rps: None,
            of_limit: None,
            of_limit_at_most: false,
            first_error: self.first_error.clone(),
        }
    }
}

pub fn line(s: &Summary, width: usize) -> String {
    let c = &s.counts;
    let cpu = s
        .cpu_ms_per_request
        .map(|c| format!(" cpu_ms_per_req={c:.3}"))
        .unwrap_or_default();
    let batch = s
        .mean_batch
        .map(|b| format!(" mean_batch={b:.2}"))
        .unwrap_or_default();
    let workers = s
        .server_workers
        .map(|w| format!(" workers={w}"))
        .unwrap_or_default();
    let limit = match (s.forward_limit_rps, s.of_limit) {
        (Some(l), Some(f)) => {
            let at = if s.of_limit_at_most { "<=" } else { "=" };
            format!(" forward_limit_rps={l:.0} of_limit{at}{f:.3}")
        }
        _ => String::new(),
    };
    format!(
        "{:<width$} protocol={} requests={} ok={} deadline={} rejected={} malformed={} wrong={} expired_computed={} p50_ms={:.3} p99_ms={:.3} rps={:.1}{cpu}{workers}{batch}{limit}",
        format!("{}:", s.server),
        s.protocol,
        c.requests,
        c.ok,
        c.deadline,
        c.rejected,
        c.malformed,
        c.wrong,
        c.expired_computed,
        s.p50_ms,
        s.p99_ms,
        s.rps
    )
}

/// A warm-up (not counted), then the counted run, added to `acc`; the
/// server's CPU read around the counted run when `load` started it.
pub async fn one_run(
    target: &Target,
    server: Option<&Server>,
    pool: &Arc<Pool>,
    args: &Args,
    tolerance: f32,
    check_workers: bool,
    acc: &mut Acc,
) -> Result<(), String> {
    let _ = client::drive(
        target,
        Arc::clone(pool),
        args.warmup,
        args.concurrency,
        Duration::from_secs(30),
        tolerance,
    )
    .await;
    let cpu0 = server.and_then(Server::cpu);
    let batches0 = if check_workers {
        limit::batch_counts(&target.addr).await
    } else {
        None
    };
    let r = client::drive(
        target,
        Arc::clone(pool),
        args.requests,
        args.concurrency,
        Duration::from_secs(args.max_seconds),
        tolerance,
    )
    .await;
    let cpu1 = server.and_then(Server::cpu);
    if let (Some(a), Some(b)) = (batches0, limit::batch_counts(&target.addr).await) {
        let (n, e) = acc.batches.unwrap_or_default();
        acc.batches = Some((n + b.0 - a.0, e + b.1 - a.1));
    }
    if check_workers && let Some(w) = live_workers(&target.addr).await {
        acc.server_workers = Some(w);
    }
    if let (Some(a), Some(b)) = (cpu0, cpu1) {
        acc.cpu = Some(acc.cpu.unwrap_or_default() + b.saturating_sub(a));
    }
    let name = target.protocol.name();
    if !acc.protocols.contains(&name) {
        acc.protocols.push(name);
    }
    acc.counts.add(&r.counts);
    acc.latencies.extend(r.latencies);
    acc.elapsed += r.elapsed;
    if acc.first_error.is_none() {
        acc.first_error = r.first_error;
    }
    if check_workers {
        acc.workers = client::workers_as_before(&target.addr).await?;
    }
    Ok(())
}

/// The batcher workers running on a tch-scope server, from its `/metrics`
/// (`serve_batch_workers_live`, summed over batchers); `None` when it does
/// not report them.
async fn live_workers(addr: &str) -> Option<usize> {
    const GAUGE: &str = "serve_batch_workers_live";
    let (status, body) = client::get(addr, "/metrics").await.ok()?;
    if status != 200 {
        return None;
    }
    let values: Vec<f64> = String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.starts_with(GAUGE))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() as usize)
}

/// Prints every server's line (or JSON line), the ratios of each pair and
/// the goals that apply; false when a check failed (wrong outputs, errors,
/// an expired request computed).
pub fn print(
    summaries: &[Summary],
    kinds: &[Option<ServerKind>],
    args: &Args,
    label: Option<&str>,
) -> Result<bool, String> {
    let width = summaries
        .iter()
        .map(|s| s.server.len() + 1)
        .max()
        .unwrap_or(0)
        .max(9);
    let mut fine = true;
    for s in summaries {
        if args.json {
            println!("{}", serde_json::to_string(s).map_err(|e| e.to_string())?);
        } else {
            println!("{}", line(s, width));
        }
        let c = &s.counts;
        if c.wrong > 0 || c.errors > 0 || c.expired_computed > 0 {
            fine = false;
            eprintln!(
                "load: {}: wrong={} errors={} expired_computed={} (first: {:?})",
                s.server, c.wrong, c.errors, c.expired_computed, s.first_error
            );
        }
    }
    if args.json {
        return Ok(fine);
    }
    let of = label.map(|l| format!(" {l}")).unwrap_or_default();
    for (i, a) in summaries.iter().enumerate() {
        for (j, b) in summaries.iter().enumerate().skip(i + 1) {
            println!(
                "ratios{of} ({} / {}): rps={:.4} p50={:.4} p99={:.4}  ({} rounds, {} requests each, {} at a time)",
                a.server,
                b.server,
                a.rps / b.rps,
                a.p50_ms / b.p50_ms,
                a.p99_ms / b.p99_ms,
                args.rounds,
                args.requests,
                args.concurrency
            );
            for g in goals(kinds[i], kinds[j], a, b, args) {
                println!("goal{of}: {g}");
            }
        }
    }
    if let Some(g) = shares(summaries) {
        println!("goal{of}: {g}");
    }
    Ok(fine)
}

/// The goals of docs/serving.md that a pair of servers measures.
fn goals(
    a: Option<ServerKind>,
    b: Option<ServerKind>,
    x: &Summary,
    y: &Summary,
    args: &Args,
) -> Vec<String> {
    let verdict = |met: bool| if met { "met" } else { "missed" };
    let rps = x.rps / y.rps;
    let p50 = x.p50_ms / y.p50_ms;
    let p99 = x.p99_ms / y.p99_ms;
    let concurrency = args.concurrency;
    // The workers, when `--workers` set them for every server of the run.
    let workers = args
        .workers
        .map(|w| format!(", {w} workers each"))
        .unwrap_or_default();
    let pair = format!(
        "{} / {}, {concurrency} at a time{workers}",
        x.server, y.server
    );
    match (a, b) {
        (Some(ServerKind::Batched), Some(ServerKind::Unbatched)) if concurrency == 1 => {
            vec![format!(
                "{pair}: p50 {p50:.3} <= 1.05: {}",
                verdict(p50 <= 1.05)
            )]
        }
        (Some(ServerKind::Batched), Some(ServerKind::Unbatched)) => vec![
            format!("{pair}: rps {rps:.3} >= 3: {}", verdict(rps >= 3.0)),
            format!("{pair}: p99 {p99:.3} <= 1: {}", verdict(p99 <= 1.0)),
        ],
        (Some(ServerKind::Batched), Some(ServerKind::Mlserver)) => vec![
            format!("{pair}: rps {rps:.3} >= 7: {}", verdict(rps >= 7.0)),
            format!("{pair}: p99 {p99:.3} <= 0.25: {}", verdict(p99 <= 0.25)),
        ],
        // The same server on two encodings: its CPU per request on each.
        (Some(ServerKind::Batched), Some(ServerKind::Batched)) if x.protocol != y.protocol => {
            match (x.cpu_ms_per_request, y.cpu_ms_per_request) {
                (Some(cx), Some(cy)) => vec![format!(
                    "{pair}: server CPU per request {} {:.0} us, {} {:.0} us ({:.3}): reported",
                    x.protocol,
                    cx * 1e3,
                    y.protocol,
                    cy * 1e3,
                    cx / cy
                )],
                _ => Vec::new(),
            }
        }
        _ => Vec::new(),
    }
}

/// The share of the forward-alone limit each server reached, one goal
/// line for the run (`--forward-limit`; `<=` for a bound).
fn shares(summaries: &[Summary]) -> Option<String> {
    let each: Vec<String> = summaries
        .iter()
        .filter_map(|s| {
            let at = if s.of_limit_at_most { "<=" } else { "" };
            Some(format!("{} {at}{:.2}", s.server, s.of_limit?))
        })
        .collect();
    (!each.is_empty()).then(|| {
        format!(
            "the share of the forward-alone limit: {}: reported",
            each.join(", ")
        )
    })
}
