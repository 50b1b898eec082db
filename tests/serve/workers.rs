//! Workers that end, and inputs that tried to end them: `/healthz` and
//! `/readyz` say so (503, with a reason), requests queued for a worker
//! that is gone and requests that come later are answered at once (503),
//! never left waiting; and the debug routes leave no control request
//! behind when their client goes.

use super::*;

/// `/readyz`: (status, JSON body).
fn readyz(addr: &str) -> (u16, serde_json::Value) {
    let (status, body) = http(addr, "GET", "/readyz", &[], b"");
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}")),
    )
}

/// A `/predict` on a thread of its own, with a budget long enough that no
/// deadline answers it while the test waits: (status, body).
fn predict_later(
    addr: &str,
    extra: &'static [(&'static str, &'static str)],
    body: String,
) -> std::thread::JoinHandle<(u16, serde_json::Value)> {
    let addr = addr.to_string();
    std::thread::spawn(move || {
        let mut headers = vec![
            ("content-type", "application/json"),
            ("x-deadline-ms", "60000"),
        ];
        headers.extend_from_slice(extra);
        predict_with(&addr, &headers, &body)
    })
}

/// The one worker ends (`x-debug-fault: die`) with another request queued
/// behind it: the queued request is answered 503 at once (it would
/// otherwise wait for a worker that will never come), `/healthz` and
/// `/readyz` answer 503 naming the reason, and a later `/predict` is 503
/// at once. For the batched server, the worker pool (`--max-batch 1`) and
/// the plain server. (Every wait is bounded by the client's 30 s read
/// timeout: a request left waiting fails the test with "no answer".)
fn a_dead_worker(plain: bool, extra: &[&str]) {
    let mut flags = vec!["--workers", "1"];
    flags.extend_from_slice(extra);
    let s = start(plain, &flags);
    let a = s.addr.as_str();
    let what = format!("plain {plain}, {extra:?}");
    let (status, body) = http(a, "POST", "/debug/pause", &[], b"");
    assert_eq!(status, 200, "{what}: {body}");
    let dies = predict_later(a, &[("x-debug-fault", "die")], input(1, 32));
    wait_queued(a, 1);
    let queued = predict_later(a, &[], input(1, 32));
    wait_queued(a, 2);
    let (status, body) = http(a, "POST", "/debug/resume", &[], b"");
    assert_eq!(status, 200, "{what}: {body}");

    let (status, v) = dies.join().unwrap();
    assert_eq!(
        status, 500,
        "{what}: the request that ended its worker: {v}"
    );
    let (status, v) = queued.join().unwrap();
    assert_eq!(status, 503, "{what}: the request queued behind it: {v}");
    assert!(
        error(&v).contains("no model worker is running"),
        "{what}: {v}"
    );

    let (status, v) = healthz(a);
    assert_eq!(status, 503, "{what}: {v}");
    assert_eq!(v["gone"], serde_json::json!([0]), "{what}: {v}");
    let reason = v["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no reason: {v}"));
    assert!(reason.contains("no model worker is running"), "{what}: {v}");
    let (status, v) = readyz(a);
    assert_eq!(status, 503, "{what}: {v}");
    let reason = v["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no reason: {v}"));
    assert!(reason.contains("no model worker is running"), "{what}: {v}");

    let (status, v) = predict(a, Some("60000"), &input(1, 32));
    assert_eq!(status, 503, "{what}: a request after the worker ended: {v}");
    assert!(
        error(&v).contains("no model worker is running"),
        "{what}: {v}"
    );
}

#[test]
fn a_dead_batcher_worker_fails_its_queue_fast_and_health_says_so() {
    a_dead_worker(false, &[]);
}

#[test]
fn a_dead_pool_worker_fails_its_queue_fast_and_health_says_so() {
    a_dead_worker(false, &["--max-batch", "1"]);
}

#[test]
fn a_dead_plain_worker_fails_its_queue_fast_and_health_says_so() {
    a_dead_worker(true, &[]);
}

/// Two zero-element requests with a huge dim 0 (`[2^62, 0]`, whose rows
/// overflow `i64` when added) queued while the one worker is held: each is
/// answered (the model refuses the input: 422), and the server goes on
/// serving with its health honest, 200 everywhere.
#[test]
fn requests_whose_rows_overflow_when_batched_do_not_disable_the_server() {
    let s = start(false, &["--workers", "1"]);
    let a = s.addr.as_str();
    let (status, body) = http(a, "POST", "/debug/pause", &[], b"");
    assert_eq!(status, 200, "{body}");
    let hostile = "{\"shape\":[4611686018427387904,0],\"data\":[]}";
    let both: Vec<_> = (0..2)
        .map(|i| {
            let h = predict_later(a, &[], hostile.to_string());
            wait_queued(a, i + 1);
            h
        })
        .collect();
    let (status, body) = http(a, "POST", "/debug/resume", &[], b"");
    assert_eq!(status, 200, "{body}");
    for h in both {
        let (status, v) = h.join().unwrap();
        assert_eq!(status, 422, "a [2^62, 0] request: {v}");
        assert!(error(&v).contains("the model refused the input"), "{v}");
    }
    for _ in 0..3 {
        let (status, v) = predict(a, Some("60000"), &input(2, 32));
        assert_eq!(status, 200, "a request after them: {v}");
    }
    let (status, v) = healthz(a);
    assert_eq!(status, 200, "{v}");
    let (status, v) = readyz(a);
    assert_eq!(status, 200, "{v}");
    assert_workers_as_before(a, 1);
}

/// A `/debug/workers` whose client leaves while its check waits behind a
/// busy worker: the check is cancelled, and no control request stays
/// registered for it (`controls_pending` in the next `/debug/workers`).
#[test]
fn a_debug_check_whose_client_left_leaves_no_control_behind() {
    let s = start(false, &["--workers", "1"]);
    let a = s.addr.as_str();
    let busy = predict_later(a, &[("x-debug-fault", "sleep:1500")], input(1, 32));
    let t = Instant::now();
    while healthz(a).1["workers"][0]["state"] != "busy" {
        assert!(t.elapsed() < Duration::from_secs(10), "{}", healthz(a).1);
        std::thread::sleep(Duration::from_millis(20));
    }
    {
        let mut c = TcpStream::connect(a).unwrap();
        write!(c, "GET /debug/workers HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
        wait_queued(a, 1);
    } // the client goes, its check still queued
    let (status, v) = busy.join().unwrap();
    assert_eq!(status, 200, "{v}");
    let t = Instant::now();
    loop {
        let (_, text) = http(a, "GET", "/metrics", &[], b"");
        if text.contains("tch_scope_batch_cancelled_total{name=\"model-worker\"} 1") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the check was not cancelled:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, body) = http(a, "GET", "/debug/workers", &[], b"");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["controls_pending"], 0, "{v}");
}
