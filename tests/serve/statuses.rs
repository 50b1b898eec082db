//! Statuses and request ids: the library's through examples/serve;
//! serve-lab's (batched and `--plain`), its worker held by `/debug/pause`
//! for the 503 and read by `/debug/workers` after, and a worker's panic
//! (the `x-debug-fault` header, `--debug` only) logged under its request
//! id, never sent to the client.

use super::*;

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
    let _ = deadline_statuses(a);

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

/// serve-lab's batched server (its 400 messages, and its worker's state
/// after, read by `/debug/workers`); the library's statuses are the
/// example's test below and serve/failing.rs's.
#[test]
fn tch_scope_server_answers_504_400_503_and_its_worker_is_as_before() {
    status_codes(false);
}

#[test]
fn plain_server_answers_504_400_503_and_its_worker_is_as_before() {
    status_codes(true);
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

    not_finite_is_500(a);

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

/// The library's answers through examples/serve, each with an
/// `x-request-id` (the client's own when it gave one, else the server's,
/// also in an error's body): 200; 400 for what is malformed (each saying
/// what), a feature count the model's input does not take (refused by its
/// declared shape, before the model: not the 422 of a model that refuses
/// an input, see serve/failing.rs), a bad or clamped `x-deadline-ms`; 415
/// for a body that is not JSON; 500 for an output that is not finite
/// (never a `null` in a 200); 504 for a deadline already past; 404 for
/// another route. `/metrics` counts each by route and status.
#[test]
fn the_example_answers_400_415_500_504_with_request_ids_and_counts_them() {
    let s = start_example(&mlp_flags(&["--workers", "1", "--body-limit", "4096"]));
    let a = s.addr.as_str();
    let json = ("content-type", "application/json");
    let id_of = |fields: &Headers, what: &str| -> String {
        let id = header(fields, "x-request-id")
            .unwrap_or_else(|| panic!("{what}: no x-request-id in {fields:?}"));
        assert!(!id.is_empty(), "{what}");
        id.to_owned()
    };

    let (status, fields, v) = predict_full(a, &[json], &input(2, 32));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["shape"], serde_json::json!([2, 8]), "{v}");
    assert_eq!(v["data"].as_array().map(Vec::len), Some(16), "{v}");
    let first = id_of(&fields, "a 200");
    let (_, fields, _) = predict_full(a, &[json], &input(1, 32));
    assert_ne!(id_of(&fields, "another 200"), first, "two requests, one id");
    let (_, fields, _) = predict_full(a, &[json, ("x-request-id", "trace-77")], &input(1, 32));
    assert_eq!(id_of(&fields, "a given id"), "trace-77");

    let bad: &[(&str, String, &str)] = &[
        (
            "bad JSON",
            "{\"shape\": [1, 32], \"data\": [1".into(),
            "EOF",
        ),
        (
            "wrong length",
            "{\"shape\": [2, 32], \"data\": [1, 2, 3]}".into(),
            "`data` has 3 values, `shape` [2, 32] needs 64",
        ),
        (
            "not a number",
            "{\"shape\": [1, 2], \"data\": [1, \"x\"]}".into(),
            "invalid type",
        ),
        (
            "negative",
            "{\"shape\": [-1, 32], \"data\": []}".into(),
            "does not fit the model's input [-1, 32]",
        ),
        (
            "unknown field",
            "{\"shape\": [1, 32], \"data\": [], \"x\": 1}".into(),
            "unknown field",
        ),
        (
            "16 features",
            input(2, 16),
            "does not fit the model's input [-1, 32]",
        ),
        ("over the limit", input(64, 32), "at most 4096 bytes"),
    ];
    for (what, body, says) in bad {
        let (status, fields, v) = predict_full(a, &[json], body);
        assert_eq!(status, 400, "{what}: {v}");
        assert!(error(&v).contains(says), "{what}: {v}");
        assert_eq!(
            v["request_id"].as_str(),
            Some(id_of(&fields, what).as_str()),
            "{v}"
        );
    }
    for (what, headers) in [
        ("text/plain", &[("content-type", "text/plain")][..]),
        ("no content-type", &[][..]),
    ] {
        let (status, v) = predict_with(a, headers, &input(1, 32));
        assert_eq!(status, 415, "{what}: {v}");
        assert!(error(&v).contains("content-type: application/json"), "{v}");
    }
    let charset = ("content-type", "application/json; charset=utf-8");
    let (status, v) = predict_with(a, &[charset], &input(1, 32));
    assert_eq!(status, 200, "{v}");

    let v = deadline_statuses(a);
    assert!(error(&v).contains("not computed"), "{v}");

    not_finite_is_500(a);

    // Every answer has an id: health, metrics, the protocol's, a 404.
    for path in [
        "/healthz",
        "/readyz",
        "/metrics",
        "/v2/health/ready",
        "/v2/models/serve_mlp",
        "/nowhere",
    ] {
        let (status, fields, _) = http_full(a, "GET", path, &[], b"");
        assert!(
            status == 200 || (path == "/nowhere" && status == 404),
            "{path}: {status}"
        );
        id_of(&fields, path);
    }

    let text = metrics_text(a);
    for line in [
        "serve_requests_total{route=\"predict\",status=\"200\"} 5",
        "serve_requests_total{route=\"predict\",status=\"400\"} 8",
        "serve_requests_total{route=\"predict\",status=\"415\"} 2",
        "serve_requests_total{route=\"predict\",status=\"500\"} 1",
        "serve_requests_total{route=\"predict\",status=\"504\"} 1",
    ] {
        assert!(text.contains(line), "no {line} in\n{text}");
    }
}

/// `x-deadline-ms`: 400 for one that is not a number, a clamped one (past a
/// day) served, 504 for one already past (the forward never starts): the
/// 504's body.
fn deadline_statuses(a: &str) -> serde_json::Value {
    let (status, v) = predict(a, Some("soon"), &input(1, 32));
    assert_eq!(status, 400, "{v}");
    assert!(error(&v).contains("x-deadline-ms"), "{v}");
    // The longest budget is clamped (to a day), not an overflow.
    let (status, v) = predict(a, Some("18446744073709551615"), &input(1, 32));
    assert_eq!(status, 200, "{v}");
    let (status, v) = predict(a, Some("0"), &input(1, 32));
    assert_eq!(status, 504, "{v}");
    assert!(error(&v).starts_with("deadline passed "), "{v}");
    v
}

/// Finite inputs whose output overflows to NaN: a 500 with the request's
/// id, never a `null` in a 200.
fn not_finite_is_500(a: &str) {
    let json = ("content-type", "application/json");
    let huge = format!(
        "{{\"shape\": [1, 32], \"data\": [{}]}}",
        vec!["3e38"; 32].join(", ")
    );
    let (status, v) = predict_with(a, &[json], &huge);
    assert_eq!(status, 500, "{v}");
    assert!(error(&v).contains("not finite"), "{v}");
    assert!(v["request_id"].is_string(), "{v}");
}
