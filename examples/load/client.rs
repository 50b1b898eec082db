//! The client side of a run: keep-alive HTTP/1.1 connections, each with
//! one request in flight, the answers counted and checked against the
//! reference rows.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::floats;
use crate::oip;
use crate::requests::{Class, Pool, Protocol, request};

/// The answers of a run, by what they were.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Counts {
    pub requests: usize,
    pub ok: usize,
    pub deadline: usize,
    pub rejected: usize,
    pub malformed: usize,
    pub wrong: usize,
    /// Requests sent already expired (`x-deadline-ms: 0`) answered 200.
    pub expired_computed: usize,
    /// Other statuses, transport errors, a status that does not fit the
    /// request (a malformed one answered 200, a valid one 400).
    pub errors: usize,
    pub sent_valid: usize,
    pub sent_tight: usize,
    pub sent_zero_deadline: usize,
    pub sent_malformed: usize,
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        self.requests += o.requests;
        self.ok += o.ok;
        self.deadline += o.deadline;
        self.rejected += o.rejected;
        self.malformed += o.malformed;
        self.wrong += o.wrong;
        self.expired_computed += o.expired_computed;
        self.errors += o.errors;
        self.sent_valid += o.sent_valid;
        self.sent_tight += o.sent_tight;
        self.sent_zero_deadline += o.sent_zero_deadline;
        self.sent_malformed += o.sent_malformed;
    }
}

#[derive(Debug, Default)]
pub struct RunResult {
    pub counts: Counts,
    pub latencies: Vec<Duration>,
    pub elapsed: Duration,
    pub first_error: Option<String>,
}

/// Where and how a run sends its requests.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: String,
    pub protocol: Protocol,
    /// `/predict` or `/v2/models/{name}/infer`.
    pub path: String,
    pub valid_only: bool,
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

pub async fn connect(addr: &str) -> Result<Sender, String> {
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// An answer: its status, its `Inference-Header-Content-Length` (binary
/// data after a JSON header) and its body.
pub struct Answer {
    pub status: u16,
    pub header_len: Option<usize>,
    pub body: Bytes,
}

const HEADER_LENGTH: &str = "inference-header-content-length";

/// One request on `sender`: `header_len` makes it a binary one.
pub async fn send(
    sender: &mut Sender,
    addr: &str,
    method: &str,
    path: &str,
    deadline_ms: Option<u64>,
    body: Bytes,
    header_len: Option<usize>,
) -> Result<Answer, String> {
    let content_type = if header_len.is_some() {
        "application/octet-stream"
    } else {
        "application/json"
    };
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr)
        .header("content-type", content_type);
    if let Some(ms) = deadline_ms {
        b = b.header("x-deadline-ms", ms.to_string());
    }
    if let Some(n) = header_len {
        b = b.header(HEADER_LENGTH, n.to_string());
    }
    let req = b.body(Full::new(body)).map_err(|e| e.to_string())?;
    sender.ready().await.map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let header_len = resp
        .headers()
        .get(HEADER_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(Answer {
        status,
        header_len,
        body,
    })
}

/// `GET path` on a new connection: its status and body.
pub async fn get(addr: &str, path: &str) -> Result<(u16, Bytes), String> {
    let mut s = connect(addr).await?;
    let a = send(&mut s, addr, "GET", path, None, Bytes::new(), None).await?;
    Ok((a.status, a.body))
}

#[derive(Deserialize)]
struct PredictAnswer<'a> {
    #[serde(borrow)]
    data: &'a RawValue,
}

/// The output floats of a 200 answer in `protocol`.
fn output(a: &Answer, protocol: Protocol) -> Result<Vec<f32>, String> {
    match protocol {
        Protocol::Predict => {
            let p: PredictAnswer<'_> =
                serde_json::from_slice(&a.body).map_err(|e| e.to_string())?;
            floats::parse_f32_array(p.data.get())
        }
        Protocol::V2Json | Protocol::V2Binary => oip::output(&a.body, a.header_len),
    }
}

/// Whether a 200 answer carries the reference output: bitwise when
/// `tolerance` is 0, else each value within `tolerance` of it.
fn matches(a: &Answer, protocol: Protocol, expected: &[f32], tolerance: f32) -> bool {
    let Ok(got) = output(a, protocol) else {
        return false;
    };
    got.len() == expected.len()
        && got
            .iter()
            .zip(expected)
            .all(|(g, e)| g.to_bits() == e.to_bits() || (g - e).abs() <= tolerance)
}

/// What a 200 answer off the reference held: its length and first values,
/// or why it could not be read.
fn off_reference(i: usize, a: &Answer, protocol: Protocol) -> String {
    match output(a, protocol) {
        Ok(v) => format!(
            "request {i}: {} values off the reference, the first {:?}",
            v.len(),
            &v[..v.len().min(4)]
        ),
        Err(e) => format!("request {i}: an answer that does not read: {e}"),
    }
}

/// Sends requests `0..n` (each to the next free connection) over
/// `concurrency` connections, stopping early after `max`.
pub async fn drive(
    target: &Target,
    pool: Arc<Pool>,
    n: usize,
    concurrency: usize,
    max: Duration,
    tolerance: f32,
) -> RunResult {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (next, pool, t) = (Arc::clone(&next), Arc::clone(&pool), target.clone());
        tasks.push(tokio::spawn(async move {
            let mut r = RunResult::default();
            let mut sender: Option<Sender> = None;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || start.elapsed() > max {
                    break;
                }
                let req = request(i, &pool, t.protocol, t.valid_only);
                r.counts.requests += 1;
                match req.class {
                    Class::Valid => r.counts.sent_valid += 1,
                    Class::Tight => {
                        r.counts.sent_tight += 1;
                        if req.deadline_ms == 0 {
                            r.counts.sent_zero_deadline += 1;
                        }
                    }
                    Class::Malformed => r.counts.sent_malformed += 1,
                }
                let t0 = Instant::now();
                let answer = async {
                    if sender.as_ref().is_none_or(|s| s.is_closed()) {
                        sender = Some(connect(&t.addr).await?);
                    }
                    let s = sender.as_mut().ok_or("no connection")?;
                    let deadline = Some(req.deadline_ms);
                    send(
                        s,
                        &t.addr,
                        "POST",
                        &t.path,
                        deadline,
                        req.body,
                        req.header_len,
                    )
                    .await
                };
                let answer = tokio::time::timeout(Duration::from_secs(30), answer)
                    .await
                    .unwrap_or_else(|_| Err("no answer in 30 s".into()));
                let took = t0.elapsed();
                let c = &mut r.counts;
                match (answer, req.class) {
                    (Ok(a), Class::Valid | Class::Tight) if a.status == 200 => {
                        c.ok += 1;
                        r.latencies.push(took);
                        if req.deadline_ms == 0 {
                            c.expired_computed += 1;
                        }
                        if !matches(&a, t.protocol, &pool.expected[req.pool], tolerance) {
                            c.wrong += 1;
                            r.first_error
                                .get_or_insert_with(|| off_reference(i, &a, t.protocol));
                        }
                    }
                    (Ok(a), Class::Valid | Class::Tight) if a.status == 504 => c.deadline += 1,
                    (Ok(a), Class::Valid | Class::Tight) if a.status == 503 => c.rejected += 1,
                    // 422: the shape the model refuses; 413: a body over
                    // the limit, as an Open Inference Protocol server may
                    // answer it.
                    (Ok(a), Class::Malformed) if matches!(a.status, 400 | 413 | 422) => {
                        c.malformed += 1;
                    }
                    (Ok(a), class) => {
                        c.errors += 1;
                        r.first_error.get_or_insert_with(|| {
                            format!(
                                "{class:?} request {i} got {}: {}",
                                a.status,
                                String::from_utf8_lossy(&a.body[..a.body.len().min(300)])
                            )
                        });
                    }
                    (Err(e), _) => {
                        c.errors += 1;
                        sender = None;
                        r.first_error.get_or_insert(e);
                    }
                }
            }
            r
        }));
    }
    let mut total = RunResult::default();
    for t in tasks {
        match t.await {
            Ok(r) => {
                total.counts.add(&r.counts);
                total.latencies.extend(r.latencies);
                if total.first_error.is_none() {
                    total.first_error = r.first_error;
                }
            }
            Err(e) => {
                total.counts.errors += 1;
                total.first_error.get_or_insert(e.to_string());
            }
        }
    }
    total.elapsed = start.elapsed();
    total
}

/// `GET /debug/workers`: whether every worker's grad mode, inference mode
/// and model modes are what they were at its start, and operators run.
/// A server without the route (404: `serve`, the library's server, which
/// has no debug routes) has no workers to check: 0.
pub async fn workers_as_before(addr: &str) -> Result<usize, String> {
    let (status, body) = get(addr, "/debug/workers").await?;
    if status == 404 {
        return Ok(0);
    }
    if status != 200 {
        return Err(format!(
            "/debug/workers: {status} {}",
            String::from_utf8_lossy(&body)
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    let workers = v["workers"].as_array().ok_or("no workers")?;
    for w in workers {
        if w["at_start"] != w["now"] || w["now"]["ops_ok"] != true {
            return Err(format!("a worker changed: {w}"));
        }
    }
    Ok(workers.len())
}
