//! The servers as real processes on loopback. Most tests run what users
//! run: `examples/serve` (the serving library, `tch_scope::serve`, and its
//! flags), started by [`start_example`] — its statuses and request ids,
//! `/metrics` through `promtool check metrics`, short load runs by
//! `examples/load` (bitwise unbatched, within 1e-5 batched), slow, silent
//! and idle connections closed on their clocks and capped, SIGTERM (once
//! and twice) and its bound, a model that fails on some inputs
//! (serve/failing.rs), the Open Inference Protocol (serve/oip.rs, through
//! examples/serve_min). The tests of fault injection (`x-debug-fault`,
//! `x-debug-grad`, `/debug/*`, which only the tests' own server has) and
//! of the plain-tch baseline (`--plain`) run the tests' server `serve-lab`
//! ([`start`], [`start_as`]): workers that panic, sleep or end, batches
//! held and let go, mixed scope states never sharing a forward.
//!
//! The example binaries are the ones beside this test's binary, which
//! `make test` builds first (a nested `cargo build` would wait on the lock
//! `cargo test` holds). Every wait is bounded; the servers and the
//! clients are killed when dropped.

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

/// `serve` and `load` beside this test's binary (`target/<profile>/examples/`;
/// `serve` from `TCH_SCOPE_SERVE_BIN` when it is set), and the tests' own
/// server `serve-lab` (this package's binary).
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
        // Another build of the example (an older library, to see a test
        // fail before its fix): `TCH_SCOPE_SERVE_BIN`.
        if let Some(p) = std::env::var_os("TCH_SCOPE_SERVE_BIN") {
            bins.insert("serve".into(), PathBuf::from(p));
        }
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

/// `examples/serve` (the library's server) with `extra` flags (`--model`
/// and, for a TorchScript file, `--input-shape` among them).
fn start_example(extra: &[&str]) -> Server {
    let mut cmd = Command::new(&bins()["serve"]);
    cmd.args(["--addr", "127.0.0.1:0"]).args(extra);
    spawn(cmd, "serve")
}

/// The default model's flags for [`start_example`]: tests/data/serve_mlp.pt
/// (`[n, 32] -> [n, 8]`), then `extra`.
fn mlp_flags<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut flags = vec![MLP, "--input-shape=-1,32"];
    flags.extend_from_slice(extra);
    flags
}

/// `--model` of the default model, as one flag.
const MLP: &str = concat!("--model=", env!("CARGO_MANIFEST_DIR"), "/data/serve_mlp.pt");

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

/// Requests waiting for a worker, from `/metrics`: serve-lab's
/// `serve_queue_depth`, or the library's `serve_batch_queued{model=…}`.
fn queued(text: &str) -> Option<f64> {
    sample(text, "serve_queue_depth").or_else(|| {
        text.lines()
            .find_map(|l| l.strip_prefix("serve_batch_queued{")?.split_once("} "))
            .and_then(|(_, v)| v.trim().parse().ok())
    })
}

/// Waits (bounded) until `n` requests wait for a worker.
fn wait_queued(addr: &str, n: usize) {
    let t = Instant::now();
    loop {
        let text = metrics_text(addr);
        if queued(&text) == Some(n as f64) {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "not {n} requests queued:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The answer and its JSON body.
fn predict_with(addr: &str, headers: &[(&str, &str)], body: &str) -> (u16, serde_json::Value) {
    let (status, text) = http(addr, "POST", "/predict", headers, body.as_bytes());
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, v)
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

/// `/healthz`: (status, JSON body).
fn healthz(addr: &str) -> (u16, serde_json::Value) {
    let (status, body) = http(addr, "GET", "/healthz", &[], b"");
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}")),
    )
}

// ---- the tests, by what they test --------------------------------------------

#[path = "pt2.rs"]
mod pt2;
#[path = "serve/rows.rs"]
mod rows;
use rows::*;
#[path = "serve/lab.rs"]
mod lab;
use lab::*;

#[path = "serve/statuses.rs"]
mod statuses;

#[path = "serve/metrics.rs"]
mod metrics;

#[path = "serve/loads.rs"]
mod loads;

#[path = "serve/connections.rs"]
mod connections;

#[path = "serve/shutdown.rs"]
mod shutdown;

#[path = "serve/failing.rs"]
mod failing;

#[path = "serve/lab_faults.rs"]
mod lab_faults;

#[path = "serve/batching.rs"]
mod batching;

#[path = "serve/oip.rs"]
mod oip;

#[path = "serve/workers.rs"]
mod workers;

#[path = "serve/limits.rs"]
mod limits;
