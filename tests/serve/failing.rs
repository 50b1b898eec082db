//! A model that fails on some inputs, served by examples/serve with no
//! debug hook: a TorchScript file scripted here with PyTorch (into the
//! target's tmp folder) that raises on a row whose first value is 1000,
//! computes a row marked 2000 until its deadline ends the forward (a
//! worker held for as long as a test needs it), and is a `Linear(32, 8)`
//! otherwise. Through it, the library's answers to what a model does: the
//! model's error is the client's 422 (alone, the requests batched with it
//! answered), a deadline that ends a forward is a 504, a full queue a 503,
//! a request that expired or whose client left while queued is never
//! computed. Skipped, saying why, without PyTorch's python.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::thread::JoinHandle;

use super::*;

#[path = "../oracle.rs"]
mod oracle;

/// A row marked so is refused by the model (it raises).
const REFUSE: f32 = 1000.0;
/// A row marked so holds its worker until its deadline.
const HOLD: f32 = 2000.0;

/// The model, and PyTorch's eval rows for three inputs.
pub(crate) struct Faulty {
    pub(crate) path: PathBuf,
    pub(crate) xs: Rows,
    pub(crate) ys: Rows,
}

const SCRIPT: &str = r#"
import json, os, sys, torch

# In a file of its own: torch.jit.script reads the class's source.
SOURCE = """
import torch

class Faulty(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        marks = x[:, 0]
        if bool((marks == 1000.0).any()):
            raise RuntimeError("a row marked 1000 is refused")
        if bool((marks == 2000.0).any()):
            y = x
            # Until the deadline refuses an operator: no sleep in TorchScript.
            for _ in range(1000000000):
                y = y + 0.0
            return self.lin(y)
        return self.lin(x)
"""
folder = os.path.dirname(PATH)
with open(os.path.join(folder, "faulty_model.py"), "w") as f:
    f.write(SOURCE)
sys.path.insert(0, folder)
import faulty_model

torch.manual_seed(0)
m = torch.jit.script(faulty_model.Faulty().eval())
m.save(PATH)
x = torch.randn(3, 32)
with torch.no_grad():
    y = m(x)
bits = lambda t: t.contiguous().view(torch.int32).flatten().tolist()
print(json.dumps({"x": bits(x), "y": bits(y)}))
"#;

/// The model, scripted once per test binary; `None` (and a note) without
/// PyTorch's python.
pub(crate) fn faulty() -> Option<&'static Faulty> {
    static MODEL: OnceLock<Option<Faulty>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve");
            std::fs::create_dir_all(&dir).expect("the target's tmp folder");
            let path = dir.join("faulty.pt");
            // Saved beside it, then renamed: whole for any reader.
            let saved = dir.join(format!("faulty.pt.{}", std::process::id()));
            let script = SCRIPT.replace("PATH", &format!("{:?}", saved.display().to_string()));
            let Some(out) = oracle::python(&script) else {
                println!("skipped: no PyTorch python to script the failing model with");
                return None;
            };
            std::fs::rename(&saved, &path).expect("the scripted model in place");
            let j: serde_json::Value = serde_json::from_str(&out).expect("the script's JSON");
            let rows = |v: &serde_json::Value, n: usize| -> Rows {
                floats_of_bits(v).chunks(n).map(<[f32]>::to_vec).collect()
            };
            Some(Faulty {
                path,
                xs: rows(&j["x"], 32),
                ys: rows(&j["y"], 8),
            })
        })
        .as_ref()
}

impl Faulty {
    /// examples/serve of this model with `extra` flags.
    pub(crate) fn start(&self, extra: &[&str]) -> Server {
        let model = format!("--model={}", self.path.display());
        let mut flags = vec![model.as_str(), "--input-shape=-1,32"];
        flags.extend_from_slice(extra);
        start_example(&flags)
    }
}

/// One row of 32 whose first value is `mark`.
fn marked(mark: f32) -> String {
    let mut row = vec![0.25f32; 32];
    row[0] = mark;
    body_of(&[row])
}

/// A `/predict` of `body` with a budget of `deadline_ms`, on a thread.
fn later(addr: &str, deadline_ms: u64, body: String) -> JoinHandle<(u16, serde_json::Value)> {
    let addr = addr.to_string();
    std::thread::spawn(move || {
        let ms = deadline_ms.to_string();
        let headers = [
            ("content-type", "application/json"),
            ("x-deadline-ms", ms.as_str()),
        ];
        predict_with(&addr, &headers, &body)
    })
}

/// A sample of the model's series `name` (`{model="faulty"}`).
fn count(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// The held request's answer: `None` when the server went without one
/// (a test that ends the process while it is held).
pub(crate) type Held = JoinHandle<Option<(u16, serde_json::Value)>>;

/// Holds the one worker of the server at `addr` for `ms` (its deadline):
/// returns once the held request is being computed (taken from the queue:
/// one more submitted, none queued). It is answered 504 at its deadline.
pub(crate) fn hold(addr: &str, ms: u64) -> Held {
    let before = count(&metrics_text(addr), "serve_batch_submitted_total");
    let held = {
        let (addr, body) = (addr.to_string(), marked(HOLD));
        std::thread::spawn(move || {
            let mut c = TcpStream::connect(&addr).ok()?;
            c.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
            write!(
                c,
                "POST /predict HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                 x-deadline-ms: {ms}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .ok()?;
            let mut raw = String::new();
            let _ = c.read_to_string(&mut raw);
            let status = raw.split_whitespace().nth(1)?.parse().ok()?;
            let (_, json) = raw.split_once("\r\n\r\n")?;
            Some((status, serde_json::from_str(json).ok()?))
        })
    };
    let t = Instant::now();
    loop {
        let text = metrics_text(addr);
        if count(&text, "serve_batch_submitted_total") > before && queued(&text) == Some(0.0) {
            return held;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "never held:\n{text}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The held request's answer, which must have come.
pub(crate) fn answer_of(held: Held) -> (u16, serde_json::Value) {
    held.join()
        .expect("the held request's thread")
        .expect("an answer to the held request")
}

/// A row the model raises on: 422 naming the model's own message, on
/// `/predict` and over the protocol; the worker goes on, its answers
/// PyTorch's rows.
#[test]
fn a_model_that_raises_on_an_input_is_answered_422_and_goes_on() {
    let Some(m) = faulty() else { return };
    let s = m.start(&["--workers", "1"]);
    let a = s.addr.as_str();
    let (status, v) = predict(a, None, &marked(REFUSE));
    assert_eq!(status, 422, "{v}");
    let e = error(&v);
    assert!(e.starts_with("the model refused the input: "), "{v}");
    assert!(e.contains("a row marked 1000 is refused"), "{v}");
    assert!(!e.contains("Traceback"), "only the model's last line: {v}");

    let mut row = vec![0.25f32; 32];
    row[0] = REFUSE;
    let infer = serde_json::json!({"inputs": [{"name": "input__0", "datatype": "FP32",
        "shape": [1, 32], "data": row}]});
    let json = ("content-type", "application/json");
    let name = m.path.file_stem().unwrap().to_string_lossy().into_owned();
    let path = format!("/v2/models/{name}/infer");
    let (status, body) = http(a, "POST", &path, &[json], infer.to_string().as_bytes());
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("a row marked 1000 is refused"), "{body}");
    assert!(
        !body.contains("Traceback"),
        "only the model's last line: {body}"
    );

    for k in 0..3 {
        let (status, v) = predict(a, None, &body_of(&m.xs[k..=k]));
        assert_eq!(status, 200, "{v}");
        assert_rows_close(&v, &m.ys[k..=k], &format!("row {k} after the refusal"));
    }
    assert_eq!(healthz(a).0, 200);
}

/// The worker held; ten requests queued behind it, one of them a row the
/// model refuses. The held request's forward is ended by its deadline
/// (504: the deadline scope refused an operator); the ten are then
/// batched: the bad one fails alone (422, its batch split and rerun
/// request by request), the nine others are PyTorch's rows.
#[test]
fn a_refused_request_among_batched_ones_fails_alone_and_a_deadline_ends_a_forward() {
    let Some(m) = faulty() else { return };
    let s = m.start(&["--workers", "1", "--max-delay-ms", "20"]);
    let a = s.addr.as_str();
    let held = hold(a, 4000);
    let queued: Vec<_> = (0..10)
        .map(|k| {
            let body = if k == 3 {
                marked(REFUSE)
            } else {
                body_of(&m.xs[k % 3..=k % 3])
            };
            later(a, 60_000, body)
        })
        .collect();
    wait_queued(a, 10);
    let (status, v) = answer_of(held);
    assert_eq!(status, 504, "the held request: {v}");
    assert!(error(&v).contains("deadline"), "{v}");
    for (k, q) in queued.into_iter().enumerate() {
        let (status, v) = q.join().unwrap();
        if k == 3 {
            assert_eq!(status, 422, "{v}");
            assert!(error(&v).contains("a row marked 1000 is refused"), "{v}");
        } else {
            assert_eq!(status, 200, "request {k}: {v}");
            assert_rows_close(&v, &m.ys[k % 3..=k % 3], &format!("request {k}"));
        }
    }
    // Batched, the batch failed, and its requests ran one by one: the
    // library's batcher reruns each request of a failed batch alone.
    let text = metrics_text(a);
    assert!(count(&text, "serve_batch_split_total") >= 1.0, "{text}");
    assert_eq!(count(&text, "serve_batch_failed_total"), 2.0, "{text}");
}

/// `--queue 1`, the worker held: a request waits in the one place (its
/// deadline passes while it waits), the next finds the queue full (503);
/// once the worker is back the waiting one is answered 504 uncomputed,
/// and a request whose client left while queued is never computed
/// either.
#[test]
fn a_full_queue_is_503_and_expired_or_abandoned_requests_are_never_computed() {
    let Some(m) = faulty() else { return };
    let s = m.start(&["--workers", "1", "--queue", "1"]);
    let a = s.addr.as_str();
    let held = hold(a, 2000);
    let expiring = later(a, 150, body_of(&m.xs[0..1]));
    wait_queued(a, 1);
    let (status, v) = predict(a, Some("60000"), &body_of(&m.xs[1..2]));
    assert_eq!(status, 503, "{v}");
    assert!(error(&v).contains("queue is full"), "{v}");
    assert_eq!(answer_of(held).0, 504);
    let (status, v) = expiring.join().unwrap();
    assert_eq!(status, 504, "{v}");
    assert!(error(&v).contains("not computed"), "{v}");

    let held = hold(a, 2000);
    {
        let mut c = TcpStream::connect(a).unwrap();
        let body = body_of(&m.xs[2..3]);
        write!(
            c,
            "POST /predict HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             x-deadline-ms: 60000\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        wait_queued(a, 1);
    } // the client goes
    assert_eq!(answer_of(held).0, 504);
    let t = Instant::now();
    let text = loop {
        let text = metrics_text(a);
        if count(&text, "serve_batch_cancelled_total") == 1.0 {
            break text;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "not cancelled:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(count(&text, "serve_batch_expired_total"), 1.0, "{text}");
    assert_eq!(count(&text, "serve_batch_refused_total"), 1.0, "{text}");
    // Only the warm-up was computed with success.
    assert_eq!(count(&text, "serve_batch_inferences_total"), 1.0, "{text}");
    let (status, v) = predict(a, None, &body_of(&m.xs[0..1]));
    assert_eq!(status, 200, "{v}");
}
