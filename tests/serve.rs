//! `examples/serve.rs` as a real process on loopback — the
//! 504/400/503 answers, the `/metrics` text through `promtool check
//! metrics`, and a short load run by `examples/load.rs` (a few hundred
//! requests, 16 at a time) with every output right (bitwise unbatched,
//! within 1e-5 batched) and every worker's grad mode, inference mode and
//! model modes as before. Both servers: tch-scope's (batched by default,
//! and with `--max-batch 1`) and `--plain`. Then what a server owes its
//! clients and its operator: slow, silent and idle connections closed on
//! their clocks and capped, SIGTERM (once and twice) and its bound, the
//! 408/415/422/500 answers and request ids, requests of departed clients
//! skipped, `/healthz` and `/readyz`, concurrent debug routes. Faults in a
//! worker come from the `x-debug-fault` header (`--debug` only). Batching:
//! a burst in batches, expired and failing requests alone, and mixed scope
//! states (`x-debug-grad: on` beside default requests) never sharing a
//! forward, as the `x-debug-batch` answer headers show.
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
use std::sync::{Arc, Mutex, OnceLock};
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

/// `serve` and `load` beside this test's binary (`target/<profile>/examples/`),
/// and the tests' own server `serve-lab` (this package's binary).
/// `cargo test` holds the artifact directory's lock while tests run, so a
/// nested `cargo build` would wait forever: `make test` builds them first
/// (`cargo build --workspace --examples`; `cargo test --all-targets` builds
/// them too but leaves them under hashed names only).
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
        let mut bins: HashMap<String, PathBuf> = ["serve", "load"]
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
            .collect();
        bins.insert("serve-lab".into(), PathBuf::from(env!("CARGO_BIN_EXE_serve-lab")));
        bins
    })
}

// ---- a server process ------------------------------------------------------

/// A running `serve`, killed when dropped.
struct Server {
    child: Child,
    addr: String,
    /// Everything it wrote to stderr so far (also echoed to this test's).
    stderr: Arc<Mutex<String>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM (through kill(1): no libc here).
    fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill -TERM {}", self.pid());
    }

    /// Its exit status, waiting at most `limit`; `None` if still running.
    fn exit_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if start.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The sockets it holds open (its listener, tokio's signal pipe and
    /// every connection), from /proc.
    fn sockets(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .expect("/proc/PID/fd")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l.to_string_lossy().starts_with("socket:"))
            .count()
    }

    fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

/// `serve-lab --debug` with `extra` flags (and `--plain` if `plain`).
fn start(plain: bool, extra: &[&str]) -> Server {
    start_as(true, plain, extra)
}

/// `serve-lab`, with `--debug` only if `debug`.
fn start_as(debug: bool, plain: bool, extra: &[&str]) -> Server {
    let mut cmd = Command::new(&bins()["serve-lab"]);
    cmd.args(["--addr", "127.0.0.1:0"]).args(extra);
    if debug {
        cmd.arg("--debug");
    }
    if plain {
        cmd.arg("--plain");
    }
    spawn(cmd, "serve-lab")
}

/// Starts `cmd` (a server that prints `… http://ADDR …` as its first line
/// on stdout), its stderr echoed and kept, and waits for that line.
fn spawn(mut cmd: Command, what: &str) -> Server {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what} starts: {e}"));
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(l)) = lines.next() {
            let _ = tx.send(l);
        }
        for _ in lines {}
    });
    let stderr = Arc::new(Mutex::new(String::new()));
    {
        let pipe = child.stderr.take().expect("piped");
        let stderr = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                eprintln!("{line}");
                let mut s = stderr.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
    }
    let mut server = Server {
        child,
        addr: String::new(),
        stderr,
    };
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| {
            panic!(
                "{what} says where it listens within 60 s: {}",
                server.stderr_text()
            )
        });
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
    let (status, _, body) = http_full(addr, method, path, headers, body);
    (status, body)
}

/// The answer's head lines past the status line, as (lowercase name, value).
type Headers = Vec<(String, String)>;

/// As [`http`], with the answer's headers.
fn http_full(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Headers, String) {
    let (status, fields, body) = http_bytes(addr, method, path, headers, body);
    (status, fields, String::from_utf8_lossy(&body).into_owned())
}

/// As [`http_full`], the body as its bytes (a binary answer).
fn http_bytes(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Headers, Vec<u8>) {
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
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n");
    let head = String::from_utf8_lossy(&raw[..end.unwrap_or(raw.len())]).into_owned();
    let body = end.map_or_else(Vec::new, |end| raw[end + 4..].to_vec());
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let fields = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, fields, body)
}

/// The value of the header `name` (lowercase), if it came.
fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
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
/// inference mode off (the batched server reads it inside a forward, which
/// the batcher runs in inference mode: grad mode off, inference mode on),
/// the model all in eval mode, operators running.
fn assert_workers_as_before(addr: &str, workers: usize) {
    let (status, body) = http(addr, "GET", "/debug/workers", &[], b"");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let list = v["workers"].as_array().expect("workers");
    assert_eq!(list.len(), workers, "{v}");
    let batched = v["batched"].as_bool().expect("batched");
    for w in list {
        assert_eq!(w["at_start"], w["now"], "{w}");
        assert_eq!(w["now"]["grad_mode"], !batched, "{w}");
        assert_eq!(w["now"]["inference_mode"], batched, "{w}");
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
    // 422: well-formed, but the model refuses it.
    let (status, v) = predict(a, None, &input(2, 16));
    assert_eq!(status, 422, "{v}");
    assert!(error(&v).contains("the model refused the input"), "{v}");
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
        "http_requests_total{path=\"/predict\",status=\"400\"} 7",
        "http_requests_total{path=\"/predict\",status=\"422\"} 1",
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

/// `load --addr addr` with `extra` flags: 300 requests, 16 at a time,
/// outputs within `tolerance` of load's own (0: bitwise); its JSON line.
fn load_json(addr: &str, extra: &[&str], tolerance: &str) -> serde_json::Value {
    let child = Command::new(&bins()["load"])
        .args(["--addr", addr])
        .args(extra)
        .args(["--requests", "300", "--concurrency", "16"])
        .args(["--tolerance", tolerance])
        .args(["--warmup", "0", "--max-seconds", "120", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("load starts");
    let out = wait_bounded(child, CHILD_LIMIT, "load");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "load failed: {stdout}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The short load run: `load --addr` against a server started here with
/// `extra` flags, its outputs within `tolerance` of load's (0: bitwise).
fn short_load(plain: bool, extra: &[&str], tolerance: &str) {
    let workers = 2;
    let mut flags = vec!["--workers", "2", "--queue", "64", "--body-limit", "65536"];
    flags.extend_from_slice(extra);
    let s = start(plain, &flags);
    let v = load_json(&s.addr, &[], tolerance);
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

/// The default tch-scope server batches: a row computed in a batch may
/// differ from the row alone in its last bits.
#[test]
fn short_load_run_on_the_tch_scope_server_is_right() {
    short_load(false, &[], "1e-5");
}

#[test]
fn short_load_run_on_the_unbatched_tch_scope_server_is_bitwise_right() {
    short_load(false, &["--max-batch", "1"], "0");
}

#[test]
fn short_load_run_on_the_plain_server_is_right() {
    short_load(true, &[], "0");
}

// ---- slow clients, shutdown, statuses, workers -----------------------------

/// A request on a kept-alive connection: the status line and body of the
/// answer read by its content-length, the connection left open.
fn keep_alive_get(addr: &str, path: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nhost: {addr}\r\n\r\n").unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    (s, status)
}

/// Whether the server has closed `s`: EOF or a reset within `limit`.
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit.max(Duration::from_millis(1))))
        .unwrap();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// Whether `s` is still open now (nothing to read, no EOF).
fn open_now(s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let open = matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    s.set_nonblocking(false).unwrap();
    open
}

/// 500 silent connections, a client that sends its head a line at a time,
/// and an idle keep-alive connection: a request on a fresh connection is
/// answered at once, and the server closes each of them on its own clock
/// (the header clock starts at a head's first byte, the idle clock when a
/// connection has no request).
#[test]
fn silent_slow_and_idle_clients_are_closed_and_do_not_delay_a_request() {
    let s = start(
        false,
        &[
            "--workers",
            "1",
            "--header-timeout-s",
            "1",
            "--idle-timeout-s",
            "3",
        ],
    );
    let a = s.addr.clone();
    let base = s.sockets();
    let mut silent: Vec<TcpStream> = (0..500)
        .map(|i| TcpStream::connect(&a).unwrap_or_else(|e| panic!("connection {i}: {e}")))
        .collect();
    // A slowloris: one header line every 200 ms, never the blank line.
    let slow = {
        let a = a.clone();
        std::thread::spawn(move || {
            let mut c = TcpStream::connect(&a).unwrap();
            let t = Instant::now();
            let _ = c.write_all(b"POST /predict HTTP/1.1\r\n");
            while t.elapsed() < Duration::from_secs(8) {
                std::thread::sleep(Duration::from_millis(200));
                if c.write_all(b"x-slow: 1\r\n").is_err() {
                    return Some(t.elapsed());
                }
            }
            None
        })
    };
    let (mut idle, status) = keep_alive_get(&a, "/healthz");
    assert!(status.contains(" 200 "), "{status}");
    let idle_since = Instant::now();

    let t = Instant::now();
    let (status, v) = predict(&a, None, &input(1, 32));
    assert_eq!(status, 200, "{v}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "a request beside 500 silent connections took {:?}",
        t.elapsed()
    );

    let took = slow.join().unwrap();
    assert!(
        took.is_some_and(|d| d < Duration::from_secs(4)),
        "the slow head was not cut off at the 1 s header timeout: {took:?}"
    );
    // Past the header timeout, before the idle one: still open.
    std::thread::sleep(Duration::from_millis(1800).saturating_sub(idle_since.elapsed()));
    assert!(
        open_now(&mut idle),
        "an idle keep-alive connection closed {:?} after its request, before --idle-timeout-s",
        idle_since.elapsed()
    );
    let by = idle_since + Duration::from_secs(6);
    assert!(
        closed_within(&mut idle, by.saturating_duration_since(Instant::now())),
        "the idle keep-alive connection is still open after 6 s"
    );
    for (i, c) in silent.iter_mut().enumerate() {
        assert!(
            closed_within(c, by.saturating_duration_since(Instant::now())),
            "silent connection {i} is still open after 6 s"
        );
    }
    drop(silent);
    // And the server holds no socket for them any more.
    let t = Instant::now();
    while s.sockets() > base && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(s.sockets(), base, "sockets left open in the server");
    let (_, text) = http(&a, "GET", "/metrics", &[], b"");
    for needle in [
        "serve_connections_closed_total{reason=\"header_timeout\"} 1",
        "serve_connections_closed_total{reason=\"idle\"} 501",
    ] {
        assert!(text.contains(needle), "no {needle} in\n{text}");
    }
}

/// A body that stops coming: 408 after `--body-timeout-s`.
#[test]
fn a_body_that_stops_coming_gets_408() {
    let s = start(false, &["--workers", "1", "--body-timeout-s", "1"]);
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t = Instant::now();
    write!(
        c,
        "POST /predict HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: 1000\r\n\r\n{{\"shape\": [1, 32], "
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 408 "), "{text:?}");
    assert!(text.contains("did not arrive within 1 s"), "{text}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

/// `--max-connections 4`: 10 silent connections cost the server 4
/// sockets (the rest wait in the kernel's backlog), and a request behind
/// them is answered once the idle clock has closed those before it.
#[test]
fn connections_past_the_cap_wait_in_the_backlog() {
    let s = start(
        false,
        &[
            "--workers",
            "1",
            "--max-connections",
            "4",
            "--idle-timeout-s",
            "1",
        ],
    );
    let base = s.sockets();
    let silent: Vec<TcpStream> = (0..10)
        .map(|_| TcpStream::connect(&s.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let held = s.sockets() - base;
    assert!(held <= 4, "{held} connections accepted past a cap of 4");
    let t = Instant::now();
    let (status, v) = predict(&s.addr, None, &input(1, 32));
    assert_eq!(status, 200, "{v}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    drop(silent);
}

/// SIGTERM with the worker held by /debug/pause, a request queued behind
/// it, an idle keep-alive connection and a silent one: the pause lets go,
/// the request is answered, the process exits 0 at once (not after the
/// idle or header timeouts).
#[test]
fn sigterm_answers_the_request_in_flight_and_exits_despite_a_pause_and_idle_connections() {
    let mut s = start(false, &["--workers", "1"]);
    let a = s.addr.clone();
    let (status, body) = http(&a, "POST", "/debug/pause", &[], b"");
    assert_eq!(status, 200, "{body}");
    let queued = {
        let a = a.clone();
        std::thread::spawn(move || predict(&a, None, &input(1, 32)))
    };
    let (mut idle, status) = keep_alive_get(&a, "/healthz");
    assert!(status.contains(" 200 "), "{status}");
    let mut silent = TcpStream::connect(&a).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    s.sigterm();
    let (status, v) = queued.join().unwrap();
    assert_eq!(status, 200, "the request in flight: {v}");
    let exit = s.exit_within(Duration::from_secs(5));
    assert!(
        exit.is_some_and(|e| e.success()),
        "exit {exit:?} {:?} after SIGTERM",
        t.elapsed()
    );
    assert!(closed_within(&mut idle, Duration::from_secs(1)));
    assert!(closed_within(&mut silent, Duration::from_secs(1)));
}

/// After SIGTERM the listener is closed while a slow request finishes; a
/// second SIGTERM exits at once (status 128 + 15).
#[test]
fn after_sigterm_new_connections_are_refused_and_a_second_sigterm_exits_at_once() {
    let mut s = start(false, &["--workers", "1"]);
    let a = s.addr.clone();
    let slow = {
        let a = a.clone();
        std::thread::spawn(move || {
            let mut c = TcpStream::connect(&a).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let body = input(1, 32);
            write!(
                c,
                "POST /predict HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                 x-debug-fault: sleep:5000\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let mut raw = Vec::new();
            let _ = c.read_to_end(&mut raw);
            raw
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    s.sigterm();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        s.exit_within(Duration::ZERO).is_none(),
        "the server exited with a request in flight"
    );
    let refused = TcpStream::connect(&a);
    assert!(refused.is_err(), "a connection accepted after SIGTERM");
    let t = Instant::now();
    s.sigterm();
    let exit = s.exit_within(Duration::from_secs(2));
    assert_eq!(
        exit.and_then(|e| e.code()),
        Some(143),
        "after a second SIGTERM: {exit:?} in {:?}",
        t.elapsed()
    );
    let _ = slow.join();
}

/// A request that outlasts `--shutdown-timeout-s`: the process exits
/// within the bound (status 1, it cut work off).
#[test]
fn shutdown_is_bounded_by_its_flag() {
    let mut s = start(false, &["--workers", "1", "--shutdown-timeout-s", "1"]);
    let a = s.addr.clone();
    let _slow = {
        let a = a.clone();
        std::thread::spawn(move || {
            let _ = http(
                &a,
                "POST",
                "/predict",
                &[
                    ("content-type", "application/json"),
                    ("x-debug-fault", "sleep:20000"),
                ],
                input(1, 32).as_bytes(),
            );
        })
    };
    let (_idle, _) = keep_alive_get(&a, "/healthz");
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    s.sigterm();
    // The bound (1 s), then up to 1 s to close what is busy, then the exit:
    // well under the 20 s the request would take, with room for a loaded
    // machine.
    let exit = s.exit_within(Duration::from_secs(10));
    assert_eq!(
        exit.and_then(|e| e.code()),
        Some(1),
        "{exit:?} {:?} after SIGTERM",
        t.elapsed()
    );
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
}

/// The answer and its `x-request-id` header.
fn predict_with(addr: &str, headers: &[(&str, &str)], body: &str) -> (u16, serde_json::Value) {
    let (status, text) = http(addr, "POST", "/predict", headers, body.as_bytes());
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, v)
}

/// 415 for a body that is not JSON, 422 for an input the model refuses,
/// 500 for a non-finite output and for a panic (whose message goes to the
/// log under the request id, not to the client); the worker goes on.
fn statuses(plain: bool) {
    let s = start(plain, &["--workers", "1"]);
    let a = s.addr.as_str();
    let json = ("content-type", "application/json");

    let (status, v) = predict_with(a, &[("content-type", "text/plain")], &input(1, 32));
    assert_eq!(status, 415, "{v}");
    let (status, v) = predict_with(a, &[], &input(1, 32));
    assert_eq!(status, 415, "no content-type: {v}");
    let (status, v) = predict_with(
        a,
        &[("content-type", "application/json; charset=utf-8")],
        &input(1, 32),
    );
    assert_eq!(status, 200, "{v}");

    let (status, v) = predict_with(a, &[json], &input(2, 16));
    assert_eq!(status, 422, "{v}");

    // Finite inputs whose output overflows to NaN: never a `null` in a 200.
    let huge = format!(
        "{{\"shape\": [1, 32], \"data\": [{}]}}",
        vec!["3e38"; 32].join(", ")
    );
    let (status, v) = predict_with(a, &[json], &huge);
    assert_eq!(status, 500, "{v}");
    assert!(error(&v).contains("not finite"), "{v}");
    assert!(v["request_id"].is_string(), "{v}");

    let secret = "the-secret-in-a-panic-4242";
    let fault = format!("panic:{secret}");
    let (status, v) = predict_with(a, &[json, ("x-debug-fault", &fault)], &input(1, 32));
    assert_eq!(status, 500, "{v}");
    assert!(
        !v.to_string().contains(secret),
        "the panic message went out: {v}"
    );
    let id = v["request_id"].as_str().expect("a request id").to_string();
    let t = Instant::now();
    let logged = loop {
        let log = s.stderr_text();
        if let Some(line) = log.lines().find(|l| l.contains(&format!("request {id}:"))) {
            break line.to_string();
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "no log line for {id}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(logged.contains(secret), "{logged}");

    let (status, v) = predict(a, None, &input(3, 32));
    assert_eq!(status, 200, "the worker after its panic: {v}");
    assert_workers_as_before(a, 1);
}

#[test]
fn tch_scope_server_answers_415_422_500_and_logs_panics_under_a_request_id() {
    statuses(false);
}

#[test]
fn plain_server_answers_415_422_500_and_logs_panics_under_a_request_id() {
    statuses(true);
}

fn jobs_done(addr: &str) -> u64 {
    let (status, body) = http(addr, "GET", "/debug/workers", &[], b"");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["jobs"].as_u64().expect("jobs"))
        .sum()
}

/// A request whose client closed its connection while it was queued is
/// dropped before the model runs: on the worker pool (`--max-batch 1`)
/// and in the batcher (its ticket dropped with the handler).
fn client_left(extra: &[&str], needle: &str) {
    let mut flags = vec!["--workers", "1"];
    flags.extend_from_slice(extra);
    let s = start(false, &flags);
    let a = s.addr.as_str();
    let before = jobs_done(a);
    let (status, body) = http(a, "POST", "/debug/pause", &[], b"");
    assert_eq!(status, 200, "{body}");
    {
        let mut c = TcpStream::connect(a).unwrap();
        let body = input(1, 32);
        write!(
            c,
            "POST /predict HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(300));
    } // the client goes
    std::thread::sleep(Duration::from_millis(300));
    let (status, body) = http(a, "POST", "/debug/resume", &[], b"");
    assert_eq!(status, 200, "{body}");
    let t = Instant::now();
    loop {
        let (_, text) = http(a, "GET", "/metrics", &[], b"");
        if text.contains(needle) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "no {needle} in\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        jobs_done(a),
        before,
        "the model ran for a client that had left"
    );
}

#[test]
fn a_request_whose_client_left_is_dropped_before_compute() {
    client_left(
        &["--max-batch", "1"],
        "serve_jobs_skipped_total{reason=\"client_gone\"} 1",
    );
}

#[test]
fn a_batched_request_whose_client_left_is_cancelled_before_compute() {
    client_left(
        &[],
        "tch_scope_batch_cancelled_total{name=\"model-worker\"} 1",
    );
}

fn healthz(addr: &str) -> (u16, serde_json::Value) {
    let (status, body) = http(addr, "GET", "/healthz", &[], b"");
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}")),
    )
}

/// `/healthz`: 503 naming a worker busy past `--stuck-after-s`, then one
/// whose thread ended; the other worker goes on serving.
#[test]
fn healthz_reports_stuck_and_gone_workers() {
    let s = start(false, &["--workers", "2", "--stuck-after-s", "1"]);
    let a = s.addr.clone();
    let (status, v) = healthz(&a);
    assert_eq!(status, 200, "{v}");
    let json = ("content-type", "application/json");
    let slow = {
        let a = a.clone();
        std::thread::spawn(move || {
            predict_with(&a, &[json, ("x-debug-fault", "sleep:2500")], &input(1, 32))
        })
    };
    std::thread::sleep(Duration::from_millis(1800));
    let (status, v) = healthz(&a);
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["stuck"].as_array().map(Vec::len), Some(1), "{v}");
    let (status, v) = slow.join().unwrap();
    assert_eq!(status, 200, "{v}");
    let (status, v) = healthz(&a);
    assert_eq!(status, 200, "{v}");

    let (status, v) = predict_with(&a, &[json, ("x-debug-fault", "die")], &input(1, 32));
    assert_eq!(status, 500, "{v}");
    let (status, v) = healthz(&a);
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["gone"].as_array().map(Vec::len), Some(1), "{v}");
    for _ in 0..4 {
        let (status, v) = predict(&a, None, &input(1, 32));
        assert_eq!(status, 200, "the live worker: {v}");
    }
}

/// `/readyz` is 503 until the model's first forward has run: here the
/// warm-up shape is one the model refuses, so the first request is it.
/// With the default warm-up the server becomes ready by itself.
#[test]
fn readyz_waits_for_the_first_forward() {
    let s = start(false, &["--workers", "1", "--warmup-shape", "1,16"]);
    let a = s.addr.as_str();
    // The warm-up has been tried once the worker is idle.
    let t = Instant::now();
    while healthz(a).1["workers"][0]["state"] != "idle" {
        assert!(t.elapsed() < Duration::from_secs(30), "{}", healthz(a).1);
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, body) = http(a, "GET", "/readyz", &[], b"");
    assert_eq!(status, 503, "{body}");
    let (status, v) = predict(a, None, &input(1, 32));
    assert_eq!(status, 200, "{v}");
    let (status, body) = http(a, "GET", "/readyz", &[], b"");
    assert_eq!(status, 200, "{body}");

    let s = start(true, &["--workers", "2"]);
    let t = Instant::now();
    while http(&s.addr, "GET", "/readyz", &[], b"").0 != 200 {
        assert!(t.elapsed() < Duration::from_secs(30), "never ready");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Four `GET /debug/workers` at once on two workers all answer (each
/// check has the workers to itself), and while paused one answers 409.
#[test]
fn concurrent_debug_checks_all_answer() {
    let s = start(false, &["--workers", "2"]);
    let checks: Vec<_> = (0..4)
        .map(|_| {
            let a = s.addr.clone();
            std::thread::spawn(move || http(&a, "GET", "/debug/workers", &[], b""))
        })
        .collect();
    for c in checks {
        let (status, body) = c.join().unwrap();
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = http(&s.addr, "POST", "/debug/pause", &[], b"");
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(&s.addr, "GET", "/debug/workers", &[], b"");
    assert_eq!(status, 409, "{body}");
    let (status, body) = http(&s.addr, "POST", "/debug/resume", &[], b"");
    assert_eq!(status, 200, "{body}");
    assert_workers_as_before(&s.addr, 2);
}

// ---- an AOTInductor package ------------------------------------------------

#[path = "pt2.rs"]
mod pt2;
use pt2::packages;

#[path = "serve/oip.rs"]
mod oip;

fn floats_of_bits(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .expect("an array of bit patterns")
        .iter()
        .map(|b| f32::from_bits(b.as_i64().expect("an int32") as i32 as u32))
        .collect()
}

/// `serve --model serve_mlp.pt2` (the default model's MLP exported by
/// scripts/export_pt2.py with a dynamic batch): its answer to the input the
/// script recorded is within 1e-5 of eager PyTorch in eval mode, a batch of
/// 1 (the warm-up's) and a wrong feature count are answered as for
/// TorchScript (200, 422), every worker is as at its start (no model modes
/// to report), and a short load run (its references computed by `load`
/// with `tch_scope::aoti::Package`) is right: bitwise on the plain
/// server, within 1e-5 on the tch-scope one (it batches).
fn serves_a_pt2_package(plain: bool) {
    let Some(dir) = packages() else { return };
    let model = dir.join("serve_mlp.pt2");
    let model = model.to_str().expect("a UTF-8 path");
    let j: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("serve_mlp.json")).expect("serve_mlp.json"),
    )
    .expect("JSON");
    let workers = 2;
    let s = start(
        plain,
        &[
            "--model",
            model,
            "--workers",
            "2",
            "--queue",
            "64",
            "--body-limit",
            "65536",
        ],
    );

    // Ready: both workers ran the warm-up (a batch of 1) on the package.
    let start = Instant::now();
    loop {
        let (status, body) = http(&s.addr, "GET", "/readyz", &[], b"");
        if status == 200 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "not ready: {body}\n{}",
            s.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let shape = j["input_shape"].clone();
    let x = floats_of_bits(&j["input_bits"]);
    let eager = floats_of_bits(&j["eager_bits"]);
    let body = serde_json::json!({ "shape": shape, "data": x }).to_string();
    let (status, v) = predict(&s.addr, None, &body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["shape"], j["output_shape"], "{v}");
    let got: Vec<f32> = v["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|f| f.as_f64().expect("a number") as f32)
        .collect();
    assert_eq!(got.len(), eager.len(), "{v}");
    for (i, (g, e)) in got.iter().zip(&eager).enumerate() {
        assert!((g - e).abs() <= 1e-5, "data[{i}]: {g} against eager {e}");
    }

    let (status, v) = predict(&s.addr, None, &input(2, 16));
    assert_eq!(status, 422, "{v}");
    // `Package::run` checks the input against the package's own
    // metadata, and says which input and what the package takes.
    assert!(
        error(&v).contains("input 0") && error(&v).contains("the package takes 32"),
        "{v}"
    );

    // The tch-scope server batches: its rows within 1e-5 of load's.
    let tolerance = if plain { "0" } else { "1e-5" };
    let v = load_json(&s.addr, &["--model", model], tolerance);
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
    assert_eq!(n("requests"), 300, "{v}");
    assert_eq!(n("wrong"), 0, "{v}");
    assert_eq!(n("errors"), 0, "{v}");
    assert_eq!(n("malformed"), n("sent_malformed"), "{v}");
    assert!(n("ok") >= n("sent_valid"), "{v}");
    assert_eq!(n("workers_checked"), workers, "{v}");

    let (status, body) = http(&s.addr, "GET", "/debug/workers", &[], b"");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let list = v["workers"].as_array().expect("workers");
    assert_eq!(list.len() as u64, workers, "{v}");
    // Batched (the tch-scope server), read inside the batcher's forward.
    let batched = v["batched"].as_bool().expect("batched");
    for w in list {
        assert_eq!(w["at_start"], w["now"], "{w}");
        assert_eq!(w["now"]["grad_mode"], !batched, "{w}");
        assert_eq!(w["now"]["inference_mode"], batched, "{w}");
        assert_eq!(w["now"]["ops_ok"], true, "{w}");
        assert_eq!(w["now"]["model_training"], serde_json::json!([]), "{w}");
    }
}

#[test]
fn tch_scope_server_serves_a_pt2_package() {
    serves_a_pt2_package(false);
}

#[test]
fn plain_server_serves_a_pt2_package() {
    serves_a_pt2_package(true);
}

// ---- batching (`--max-batch`, the tch-scope server's default) --------------

/// The value of the sample `series` (name and labels, as written) in a
/// Prometheus text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The server's `/metrics` text.
fn metrics_text(addr: &str) -> String {
    let (status, text) = http(addr, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200, "{text}");
    text
}

/// Waits (bounded) until `n` requests wait for a worker.
fn wait_queued(addr: &str, n: usize) {
    let t = Instant::now();
    loop {
        let text = metrics_text(addr);
        if sample(&text, "serve_queue_depth") == Some(n as f64) {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "not {n} requests queued:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Rows of floats.
type Rows = Vec<Vec<f32>>;

/// PyTorch's eval rows for the default model (`serve_mlp.json`, written
/// by scripts/export_pt2.py with the bootstrap's PyTorch): the input rows
/// and their outputs, or `None` (and a note) without it.
fn eager_rows() -> Option<(Rows, Rows)> {
    let dir = packages()?;
    let j: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("serve_mlp.json")).expect("serve_mlp.json"),
    )
    .expect("JSON");
    assert_eq!(j["input_shape"], serde_json::json!([3, 32]), "{j}");
    assert_eq!(j["output_shape"], serde_json::json!([3, 8]), "{j}");
    let x = floats_of_bits(&j["input_bits"]);
    let y = floats_of_bits(&j["eager_bits"]);
    Some((
        x.chunks(32).map(<[f32]>::to_vec).collect(),
        y.chunks(8).map(<[f32]>::to_vec).collect(),
    ))
}

fn body_of(rows: &[Vec<f32>]) -> String {
    let data: Vec<f32> = rows.concat();
    serde_json::json!({ "shape": [rows.len(), 32], "data": data }).to_string()
}

fn assert_rows_close(v: &serde_json::Value, want: &[Vec<f32>], what: &str) {
    assert_eq!(
        v["shape"],
        serde_json::json!([want.len(), 8]),
        "{what}: {v}"
    );
    let got: Vec<f32> = v["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|f| f.as_f64().expect("a number") as f32)
        .collect();
    let want = want.concat();
    assert_eq!(got.len(), want.len(), "{what}: {v}");
    for (i, (g, e)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - e).abs() <= 1e-5,
            "{what}: data[{i}] = {g}, PyTorch's eval row says {e}"
        );
    }
}

/// A burst of concurrent requests (single rows, and the three rows in
/// one request) held behind `/debug/pause` and let go at once: every
/// answer equals PyTorch's eval rows within 1e-5, and they were computed
/// in batches (`tch_scope_batch_size` and the largest batch in
/// `/metrics`), fewer forwards than requests. Then a burst that is not
/// held: right too.
#[test]
fn a_burst_is_batched_and_answered_right() {
    let Some((xs, ys)) = eager_rows() else { return };
    let s = start(false, &["--workers", "2"]);
    let a = s.addr.clone();
    let before = jobs_done(&a);
    let (status, body) = http(&a, "POST", "/debug/pause", &[], b"");
    assert_eq!(status, 200, "{body}");
    let n = 24;
    // Request k: row k % 3, or all three rows for every sixth.
    let rows_of = |k: usize| if k % 6 == 5 { 0..3 } else { k % 3..k % 3 + 1 };
    let burst = |a: &str| -> Vec<_> {
        (0..n)
            .map(|k| {
                let (a, rows) = (a.to_string(), rows_of(k));
                let body = body_of(&xs[rows.clone()]);
                let want = ys[rows].to_vec();
                std::thread::spawn(move || (predict(&a, None, &body), want))
            })
            .collect()
    };
    let held = burst(&a);
    wait_queued(&a, n);
    let (status, body) = http(&a, "POST", "/debug/resume", &[], b"");
    assert_eq!(status, 200, "{body}");
    for (k, t) in held.into_iter().enumerate() {
        let ((status, v), want) = t.join().unwrap();
        assert_eq!(status, 200, "request {k}: {v}");
        assert_rows_close(&v, &want, &format!("request {k}"));
    }
    let text = metrics_text(&a);
    for needle in [
        "# TYPE tch_scope_batch_size histogram",
        "# TYPE tch_scope_batch_queue_seconds histogram",
        "# TYPE tch_scope_batch_executions_total counter",
        "# TYPE tch_scope_batch_inferences_total counter",
    ] {
        assert!(text.contains(needle), "no {needle} in\n{text}");
    }
    let largest = sample(&text, "serve_batch_largest").expect("serve_batch_largest");
    assert!(
        largest >= 2.0,
        "no batch formed (largest {largest}):\n{text}"
    );
    // Batches of more than one request: the histogram's count past its
    // bucket at 1.
    let size = |s: &str| {
        sample(&text, &format!("tch_scope_batch_size{s}"))
            .unwrap_or_else(|| panic!("no tch_scope_batch_size{s} in\n{text}"))
    };
    let batches = size("_count{name=\"model-worker\"}");
    let single = size("_bucket{name=\"model-worker\",le=\"1\"}");
    assert!(batches - single >= 1.0, "no batch of 2 or more:\n{text}");
    let forwards = jobs_done(&a) - before;
    assert!(
        forwards < n as u64,
        "{n} requests took {forwards} model forwards"
    );

    // Not held: as they come, batched or not, all right.
    for (k, t) in burst(&a).into_iter().enumerate() {
        let ((status, v), want) = t.join().unwrap();
        assert_eq!(status, 200, "request {k}: {v}");
        assert_rows_close(&v, &want, &format!("unheld request {k}"));
    }
    assert_workers_as_before(&a, 2);
}

/// A request whose deadline passes while it waits in the batcher's queue
/// is answered 504 and never computed (the batcher's expired count, the
/// workers' forwards unchanged); a deadline of 0 never reaches it.
#[test]
fn a_batched_request_past_its_deadline_is_never_computed() {
    let s = start(false, &["--workers", "1"]);
    let a = s.addr.clone();
    let before = jobs_done(&a);
    let (status, v) = predict(&a, Some("0"), &input(1, 32));
    assert_eq!(status, 504, "{v}");
    assert!(error(&v).starts_with("deadline passed "), "{v}");
    let (status, body) = http(&a, "POST", "/debug/pause", &[], b"");
    assert_eq!(status, 200, "{body}");
    let queued = {
        let a = a.clone();
        std::thread::spawn(move || predict(&a, Some("100"), &input(1, 32)))
    };
    wait_queued(&a, 1);
    std::thread::sleep(Duration::from_millis(300));
    let (status, body) = http(&a, "POST", "/debug/resume", &[], b"");
    assert_eq!(status, 200, "{body}");
    let (status, v) = queued.join().unwrap();
    assert_eq!(status, 504, "{v}");
    assert!(error(&v).starts_with("deadline passed "), "{v}");
    assert!(error(&v).contains("not computed"), "{v}");
    let text = metrics_text(&a);
    assert_eq!(
        sample(
            &text,
            "tch_scope_batch_expired_total{name=\"model-worker\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        jobs_done(&a),
        before,
        "the model ran for an expired request"
    );
    let (status, v) = predict(&a, None, &input(1, 32));
    assert_eq!(status, 200, "{v}");
}

/// Requests let go together: one of a shape the model refuses (422) and
/// one whose worker panics (500) fail alone; the good ones around them
/// (200) are right.
#[test]
fn a_bad_request_among_batched_ones_fails_alone() {
    let Some((xs, ys)) = eager_rows() else { return };
    let s = start(false, &["--workers", "1"]);
    let a = s.addr.clone();
    let (status, body) = http(&a, "POST", "/debug/pause", &[], b"");
    assert_eq!(status, 200, "{body}");
    let json = ("content-type", "application/json");
    let mut threads = Vec::new();
    for k in 0..10 {
        let a = a.clone();
        let (body, fault, want) = match k {
            3 => (input(1, 16), None, None),
            6 => (body_of(&xs[0..1]), Some("panic:a bad request"), None),
            _ => (
                body_of(&xs[k % 3..k % 3 + 1]),
                None,
                Some(ys[k % 3..k % 3 + 1].to_vec()),
            ),
        };
        threads.push(std::thread::spawn(move || {
            let mut headers = vec![json];
            headers.extend(fault.map(|f| ("x-debug-fault", f)));
            (k, predict_with(&a, &headers, &body), want)
        }));
    }
    wait_queued(&a, 10);
    let (status, body) = http(&a, "POST", "/debug/resume", &[], b"");
    assert_eq!(status, 200, "{body}");
    for t in threads {
        let (k, (status, v), want) = t.join().unwrap();
        match (k, want) {
            (3, _) => {
                assert_eq!(status, 422, "{v}");
                assert!(error(&v).contains("the model refused the input"), "{v}");
            }
            (6, _) => assert_eq!(status, 500, "{v}"),
            (k, Some(want)) => {
                assert_eq!(status, 200, "request {k}: {v}");
                assert_rows_close(&v, &want, &format!("request {k}"));
            }
            (k, None) => unreachable!("request {k}"),
        }
    }
    let text = metrics_text(&a);
    let largest = sample(&text, "serve_batch_largest").expect("serve_batch_largest");
    assert!(largest >= 2.0, "the good ones were not batched:\n{text}");
    assert_workers_as_before(&a, 1);
}

/// A `/predict` with `headers`: (status, answer headers, JSON body).
fn predict_full(
    addr: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Headers, serde_json::Value) {
    let (status, fields, text) = http_full(addr, "POST", "/predict", headers, body.as_bytes());
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, fields, v)
}

/// One answer of a mixed burst: whether it asked for grad mode, and what
/// its forward reported (`x-debug-batch`, `x-debug-grad-mode`).
struct Mixed {
    what: String,
    grad: bool,
    batch: i64,
}

/// A request of the default scope state (`grad` false) or with
/// `x-debug-grad: on`, checked: 200, PyTorch's eval rows within 1e-5, and
/// its forward ran with grad mode (and without inference mode) exactly
/// when it asked to.
fn mixed_request(a: &str, grad: bool, body: &str, want: &[Vec<f32>], what: &str) -> Mixed {
    let mut headers = vec![("content-type", "application/json")];
    if grad {
        headers.push(("x-debug-grad", "on"));
    }
    let (status, fields, v) = predict_full(a, &headers, body);
    assert_eq!(status, 200, "{what}: {v}");
    assert_rows_close(&v, want, what);
    let field = |name: &str| {
        header(&fields, name).unwrap_or_else(|| panic!("{what}: no {name} in {fields:?}"))
    };
    assert_eq!(field("x-debug-grad-mode"), grad.to_string(), "{what}");
    assert_eq!(
        field("x-debug-inference-mode"),
        (!grad).to_string(),
        "{what}"
    );
    let batch = field("x-debug-batch")
        .parse()
        .unwrap_or_else(|e| panic!("{what}: x-debug-batch: {e}"));
    Mixed {
        what: what.to_string(),
        grad,
        batch,
    }
}

/// Per forward (`x-debug-batch`): its requests (default, with grad).
/// Panics if one forward computed requests of both kinds.
fn per_forward(answers: &[Mixed]) -> HashMap<i64, (usize, usize)> {
    let mut forwards: HashMap<i64, (usize, usize)> = HashMap::new();
    for m in answers {
        let n = forwards.entry(m.batch).or_default();
        if m.grad {
            n.1 += 1;
        } else {
            n.0 += 1;
        }
    }
    for (id, (plain, grad)) in &forwards {
        let whose: Vec<&str> = answers
            .iter()
            .filter(|m| m.batch == *id)
            .map(|m| m.what.as_str())
            .collect();
        assert!(
            *plain == 0 || *grad == 0,
            "forward {id} computed {plain} default and {grad} grad-mode requests together: {whose:?}"
        );
    }
    forwards
}

/// Mixed scope states through the batched server, as processes on
/// loopback: requests with `x-debug-grad: on` (their context captured
/// with grad mode on, inference mode off) beside default ones
/// (`inference_mode`). 64 of them held behind `/debug/pause` on 64
/// connections and let go at once, then 64 not held over 16 connections:
/// every answer is PyTorch's eval rows within 1e-5, every forward ran in
/// the scope state its request asked for (read inside the forward, on the
/// worker), no forward computed both kinds, some computed several default
/// ones (the held burst), and every grad-mode request ran alone (its
/// answer keeps a graph of its own, whatever it came with). The workers'
/// own state is as at their start after it.
#[test]
fn mixed_scope_states_are_batched_apart_and_answered_right() {
    let Some((xs, ys)) = eager_rows() else { return };
    let s = start(
        false,
        &["--workers", "2", "--max-delay-ms", "20", "--queue", "256"],
    );
    let a = s.addr.clone();
    let json = ("content-type", "application/json");
    let (status, v) = predict_with(&a, &[json, ("x-debug-grad", "yes")], &input(1, 32));
    assert_eq!(status, 400, "{v}");
    assert!(error(&v).contains("x-debug-grad"), "{v}");

    let n = 64;
    // Request k: row k % 3, or all three rows for every sixth; grad mode
    // for every odd one: the kinds interleaved in the queue.
    let rows_of = |k: usize| if k % 6 == 5 { 0..3 } else { k % 3..k % 3 + 1 };
    let grad_of = |k: usize| k % 2 == 1;
    let (status, body) = http(&a, "POST", "/debug/pause", &[], b"");
    assert_eq!(status, 200, "{body}");
    let held: Vec<_> = (0..n)
        .map(|k| {
            let (a, rows) = (a.clone(), rows_of(k));
            let body = body_of(&xs[rows.clone()]);
            let want = ys[rows].to_vec();
            let grad = grad_of(k);
            std::thread::spawn(move || {
                mixed_request(&a, grad, &body, &want, &format!("held request {k}"))
            })
        })
        .collect();
    wait_queued(&a, n);
    let (status, body) = http(&a, "POST", "/debug/resume", &[], b"");
    assert_eq!(status, 200, "{body}");
    let held: Vec<Mixed> = held.into_iter().map(|t| t.join().unwrap()).collect();
    let forwards = per_forward(&held);
    let (plain, grad) = forwards
        .values()
        .fold((0, 0), |(p, g), &(a, b)| (p.max(a), g.max(b)));
    assert!(
        plain >= 2 && grad == 1,
        "not several default requests in a forward and every grad-mode one alone \
         (most default {plain}, most grad {grad}): {forwards:?}"
    );

    // Not held: 16 connections at a time, 4 requests each, the kinds
    // alternating; batched as they come (or not), never mixed.
    let unheld: Vec<_> = (0..16)
        .map(|c| {
            let a = a.clone();
            let (xs, ys) = (xs.clone(), ys.clone());
            std::thread::spawn(move || {
                (0..4)
                    .map(|j| {
                        let k = c * 4 + j;
                        let rows = rows_of(k);
                        let body = body_of(&xs[rows.clone()]);
                        let what = format!("unheld request {k}");
                        mixed_request(&a, (c + j) % 2 == 1, &body, &ys[rows], &what)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all = held;
    for t in unheld {
        all.extend(t.join().unwrap());
    }
    per_forward(&all);
    assert_workers_as_before(&a, 2);
}

/// `x-debug-grad` elsewhere: without `--debug` it is ignored (a bad value
/// too) and no `x-debug-*` answer header comes; `--plain` refuses `on`
/// (400: it captures no scopes); the worker pool (`--max-batch 1`) computes
/// such a request right, without the batched server's answer headers.
#[test]
fn the_grad_header_without_debug_on_plain_and_unbatched() {
    let Some((xs, ys)) = eager_rows() else { return };
    let body = body_of(&xs[0..2]);
    let json = ("content-type", "application/json");
    let no_debug_headers = |fields: &Headers, what: &str| {
        assert!(
            fields.iter().all(|(k, _)| !k.starts_with("x-debug-")),
            "{what}: {fields:?}"
        );
    };

    let s = start_as(false, false, &["--workers", "1"]);
    for value in ["on", "yes"] {
        let (status, fields, v) = predict_full(&s.addr, &[json, ("x-debug-grad", value)], &body);
        assert_eq!(status, 200, "x-debug-grad: {value} without --debug: {v}");
        assert_rows_close(&v, &ys[0..2], "without --debug");
        no_debug_headers(&fields, "without --debug");
    }
    drop(s);

    let s = start(true, &["--workers", "1"]);
    let (status, v) = predict_with(&s.addr, &[json, ("x-debug-grad", "on")], &body);
    assert_eq!(status, 400, "{v}");
    assert!(error(&v).contains("x-debug-grad"), "{v}");
    let (status, v) = predict_with(&s.addr, &[json, ("x-debug-grad", "off")], &body);
    assert_eq!(status, 200, "{v}");
    drop(s);

    let s = start(false, &["--workers", "1", "--max-batch", "1"]);
    for value in ["on", "off"] {
        let (status, fields, v) = predict_full(&s.addr, &[json, ("x-debug-grad", value)], &body);
        assert_eq!(status, 200, "x-debug-grad: {value}, --max-batch 1: {v}");
        assert_rows_close(&v, &ys[0..2], "--max-batch 1");
        no_debug_headers(&fields, "--max-batch 1");
    }
    assert_workers_as_before(&s.addr, 1);
}

// ---- workers that end, limits under hostile clients ------------------------

#[path = "serve/workers.rs"]
mod workers;

#[path = "serve/limits.rs"]
mod limits;
