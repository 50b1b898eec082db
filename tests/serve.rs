//! Issue 26: `examples/serve.rs` as a real process on loopback — the
//! 504/400/503 answers, the `/metrics` text through `promtool check
//! metrics`, and a short load run by `examples/load.rs` (a few hundred
//! requests, 16 at a time) with every output bitwise right and every
//! worker's grad mode, inference mode and model modes as before. Both
//! servers: tch-scope's and `--plain`.
//!
//! The example binaries are the ones beside this test's binary, which
//! `make test` builds first (a nested `cargo build` would wait on the lock
//! `cargo test` holds). Every wait is bounded; the server and the
//! client are killed when dropped.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long any one child process may run.
const CHILD_LIMIT: Duration = Duration::from_secs(300);

// ---- the binaries ----------------------------------------------------------

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
        .to_path_buf()
}

/// Waits for `child` at most `limit`, killing it after that.
fn wait_bounded(mut child: Child, limit: Duration, what: &str) -> std::process::Output {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what} did not finish within {limit:?}");
            }
        }
    }
    child.wait_with_output().expect("the child's output")
}

/// `serve` and `load` beside this test's binary (`target/<profile>/examples/`).
/// `cargo test` holds the artifact directory's lock while tests run, so a
/// nested `cargo build` would wait forever: `make test` builds them first
/// (`cargo test --all-targets` does too).
fn bins() -> &'static HashMap<String, PathBuf> {
    static BINS: OnceLock<HashMap<String, PathBuf>> = OnceLock::new();
    BINS.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test's path");
        // target/<profile>/deps/serve-… -> target/<profile>/examples/
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>")
            .join("examples");
        ["serve", "load"]
            .into_iter()
            .map(|name| {
                let path = dir.join(name);
                assert!(
                    path.is_file(),
                    "no {} — build it first: cargo build -p examples --example serve --example load",
                    path.display()
                );
                (name.to_string(), path)
            })
            .collect()
    })
}

// ---- a server process ------------------------------------------------------

/// A running `serve`, killed when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(plain: bool, extra: &[&str]) -> Server {
    let mut cmd = Command::new(&bins()["serve"]);
    cmd.args(["--addr", "127.0.0.1:0", "--debug"]).args(extra);
    if plain {
        cmd.arg("--plain");
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("serve starts");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(l)) = lines.next() {
            let _ = tx.send(l);
        }
        for _ in lines {}
    });
    let mut server = Server {
        child,
        addr: String::new(),
    };
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("serve says where it listens within 60 s");
    server.addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_string();
    server
}

/// One HTTP/1.1 request on its own connection: (status, body).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    // The server may answer (body over its limit) before reading it all.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    // A reset after the answer (a body the server did not read) keeps
    // what was read.
    if let Err(e) = s.read_to_end(&mut raw) {
        assert!(!raw.is_empty(), "no answer to {method} {path}: {e}");
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, body.to_string())
}

fn predict(addr: &str, deadline_ms: Option<&str>, body: &str) -> (u16, serde_json::Value) {
    let mut headers = vec![("content-type", "application/json")];
    if let Some(d) = deadline_ms {
        headers.push(("x-deadline-ms", d));
    }
    let (status, body) = http(addr, "POST", "/predict", &headers, body.as_bytes());
    let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    (status, v)
}

fn input(rows: usize, cols: usize) -> String {
    let data: Vec<String> = (0..rows * cols)
        .map(|i| format!("{}", i as f32 / 64.0 - 0.5))
        .collect();
    format!(
        "{{\"shape\": [{rows}, {cols}], \"data\": [{}]}}",
        data.join(", ")
    )
}

fn error(v: &serde_json::Value) -> &str {
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {v}"))
}

/// Every worker's state now is what it was at its start: grad mode on,
/// inference mode off, the model all in eval mode, operators running.
fn assert_workers_as_before(addr: &str, workers: usize) {
    let (status, body) = http(addr, "GET", "/debug/workers", &[], b"");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let list = v["workers"].as_array().expect("workers");
    assert_eq!(list.len(), workers, "{v}");
    for w in list {
        assert_eq!(w["at_start"], w["now"], "{w}");
        assert_eq!(w["now"]["grad_mode"], true, "{w}");
        assert_eq!(w["now"]["inference_mode"], false, "{w}");
        assert_eq!(w["now"]["ops_ok"], true, "{w}");
        let modes = w["now"]["model_training"].as_array().expect("modes");
        assert!(!modes.is_empty() && modes.iter().all(|m| m == false), "{w}");
    }
}

// ---- the tests -------------------------------------------------------------

fn status_codes(plain: bool) {
    let s = start(
        plain,
        &["--workers", "1", "--queue", "1", "--body-limit", "4096"],
    );
    let a = s.addr.as_str();

    let (status, _) = http(a, "GET", "/healthz", &[], b"");
    assert_eq!(status, 200);

    // 200: [2, 32] -> [2, 8].
    let (status, v) = predict(a, None, &input(2, 32));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["shape"], serde_json::json!([2, 8]), "{v}");
    assert_eq!(v["data"].as_array().map(Vec::len), Some(16), "{v}");

    // 400, each saying what is wrong.
    let bad: &[(&str, String, &str)] = &[
        (
            "bad JSON",
            "{\"shape\": [1, 32], \"data\": [1".into(),
            "bad JSON",
        ),
        (
            "wrong length",
            "{\"shape\": [2, 32], \"data\": [1, 2, 3]}".into(),
            "`data` has 3 values, `shape` [2, 32] needs 64",
        ),
        (
            "a shape the model refuses",
            input(2, 16),
            "the model refused the input",
        ),
        (
            "not a number",
            "{\"shape\": [2], \"data\": [1, \"x\"]}".into(),
            "data[1] is not a number",
        ),
        (
            "negative",
            "{\"shape\": [-1], \"data\": []}".into(),
            "shape[0] = -1 is negative",
        ),
        (
            "unknown field",
            "{\"shape\": [1], \"data\": [1], \"x\": 1}".into(),
            "unknown field",
        ),
        (
            "over the limit",
            input(64, 32),
            "request body over the limit of 4096 bytes",
        ),
    ];
    for (what, body, says) in bad {
        let (status, v) = predict(a, None, body);
        assert_eq!(status, 400, "{what}: {v}");
        assert!(error(&v).contains(says), "{what}: {v}");
    }
    let (status, v) = predict(a, Some("soon"), &input(1, 32));
    assert_eq!(status, 400, "{v}");
    assert!(error(&v).contains("x-deadline-ms"), "{v}");

    // The longest budget is clamped (to a day), not an overflow.
    let (status, v) = predict(a, Some("18446744073709551615"), &input(1, 32));
    assert_eq!(status, 200, "{v}");

    // 504: a deadline already past when the worker starts.
    let (status, v) = predict(a, Some("0"), &input(1, 32));
    assert_eq!(status, 504, "{v}");
    assert!(error(&v).starts_with("deadline passed "), "{v}");

    // 503 and queued time: the one worker held, a request waits in the
    // one slot (its deadline passes while it waits), the next finds the
    // queue full.
    let (status, body) = http(a, "POST", "/debug/pause", &[], b"");
    assert_eq!(status, 200, "{body}");
    let queued = {
        let a = a.to_string();
        std::thread::spawn(move || predict(&a, Some("150"), &input(1, 32)))
    };
    std::thread::sleep(Duration::from_millis(300));
    let (status, v) = predict(a, None, &input(1, 32));
    assert_eq!(status, 503, "{v}");
    assert!(error(&v).contains("queue is full"), "{v}");
    let (status, body) = http(a, "POST", "/debug/resume", &[], b"");
    assert_eq!(status, 200, "{body}");
    let (status, v) = queued.join().unwrap();
    assert_eq!(status, 504, "the queued request: {v}");
    assert!(error(&v).starts_with("deadline passed "), "{v}");

    // Nothing broke: the worker goes on, in its own state.
    let (status, v) = predict(a, Some("10000"), &input(3, 32));
    assert_eq!(status, 200, "{v}");
    assert_workers_as_before(a, 1);

    let (_, text) = http(a, "GET", "/metrics", &[], b"");
    for line in [
        "http_requests_total{path=\"/predict\",status=\"200\"} 3",
        "http_requests_total{path=\"/predict\",status=\"503\"} 1",
        "http_requests_total{path=\"/predict\",status=\"504\"} 2",
        "http_requests_total{path=\"/predict\",status=\"400\"} 8",
    ] {
        assert!(text.contains(line), "no {line} in\n{text}");
    }
}

#[test]
fn tch_scope_server_answers_504_400_503_and_its_worker_is_as_before() {
    status_codes(false);
}

#[test]
fn plain_server_answers_504_400_503_and_its_worker_is_as_before() {
    status_codes(true);
}

/// The promtool to use: $TCH_SCOPE_PROMTOOL, or what
/// scripts/bootstrap-promtool.sh finds or fetches; Err is the reason.
fn promtool() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("TCH_SCOPE_PROMTOOL") {
        return Ok(PathBuf::from(p));
    }
    let script = workspace().join("scripts/bootstrap-promtool.sh");
    let child = Command::new("bash")
        .arg(&script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let out = wait_bounded(child, Duration::from_secs(600), "bootstrap-promtool.sh");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok(PathBuf::from(path))
}

#[test]
fn metrics_pass_promtool_check_metrics() {
    let s = start(false, &["--workers", "1"]);
    // Some of each: a 200, a 400, a 504.
    assert_eq!(predict(&s.addr, None, &input(1, 32)).0, 200);
    assert_eq!(predict(&s.addr, None, "{").0, 400);
    assert_eq!(predict(&s.addr, Some("0"), &input(1, 32)).0, 504);
    let (status, text) = http(&s.addr, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200);
    assert!(
        text.contains("# TYPE http_request_duration_seconds histogram"),
        "{text}"
    );
    // tch-scope's `metrics` feature: the handler's `timed` row. The handler
    // answers every request itself (400 and 504 included), so all three
    // completed.
    for needle in [
        "# TYPE tch_scope_timed_seconds histogram",
        "tch_scope_timed_seconds_count{name=\"serve::predict\",outcome=\"completed\"} 3",
    ] {
        assert!(text.contains(needle), "no {needle} in\n{text}");
    }

    let promtool = match promtool() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: promtool check metrics: no promtool: {why}");
            return;
        }
    };
    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", promtool.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = wait_bounded(child, Duration::from_secs(60), "promtool");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n--- the text:\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The short load run: `load --addr` against a server started here.
fn short_load(plain: bool) {
    let workers = 2;
    let s = start(
        plain,
        &["--workers", "2", "--queue", "64", "--body-limit", "65536"],
    );
    let child = Command::new(&bins()["load"])
        .args([
            "--addr",
            &s.addr,
            "--requests",
            "300",
            "--concurrency",
            "16",
        ])
        .args(["--warmup", "0", "--max-seconds", "120", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("load starts");
    let out = wait_bounded(child, CHILD_LIMIT, "load");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "load failed: {stdout}");
    let v: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
    assert_eq!(n("requests"), 300, "{v}");
    assert_eq!(n("wrong"), 0, "{v}");
    assert_eq!(n("errors"), 0, "{v}");
    assert_eq!(n("rejected"), 0, "a queue of 64 for 16 at a time: {v}");
    assert_eq!(n("malformed"), n("sent_malformed"), "{v}");
    assert!(
        n("sent_malformed") > 0 && n("sent_zero_deadline") > 0,
        "{v}"
    );
    assert_eq!(
        n("ok") + n("deadline"),
        n("sent_valid") + n("sent_tight"),
        "{v}"
    );
    assert!(n("deadline") >= n("sent_zero_deadline"), "{v}");
    assert!(n("ok") >= n("sent_valid"), "{v}");
    assert_eq!(n("workers_checked"), workers as u64, "{v}");
    assert_workers_as_before(&s.addr, workers);
}

#[test]
fn short_load_run_on_the_tch_scope_server_is_right() {
    short_load(false);
}

#[test]
fn short_load_run_on_the_plain_server_is_right() {
    short_load(true);
}
