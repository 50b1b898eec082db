//! Faults in a worker and what health says of them, on the tests' own
//! server (`serve-lab --debug`: `x-debug-fault`, `/debug/pause`,
//! `/debug/workers`); and what readiness means for examples/serve.

use super::*;

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

/// examples/serve warms its model up before it listens: ready (200 on
/// `/readyz` and `/v2/health/ready`) from its first line on, live on
/// `/healthz`; a model that refuses its warm-up input (`--input-shape`
/// of 16 features for a model of 32) never listens: the process exits
/// with status 1, saying why.
#[test]
fn the_example_is_ready_when_it_listens_and_a_failed_warm_up_never_listens() {
    let s = start_example(&mlp_flags(&["--workers", "2"]));
    for path in ["/readyz", "/v2/health/ready", "/healthz", "/v2/health/live"] {
        let (status, body) = http(&s.addr, "GET", path, &[], b"");
        assert_eq!(status, 200, "{path}: {body}");
    }
    drop(s);

    let child = Command::new(&bins()["serve"])
        .args(["--addr", "127.0.0.1:0", MLP, "--input-shape=-1,16"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve starts");
    let out = wait_bounded(child, Duration::from_secs(60), "serve");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(!stdout.contains("listening"), "{stdout}");
    assert!(stderr.contains("the warm-up run failed"), "{stderr}");
}
