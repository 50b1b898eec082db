//! Batching on the tests' own server (`serve-lab --debug`): bursts held
//! behind `/debug/pause` and let go at once, batched and right; expired
//! and failing requests alone; mixed scope states (`x-debug-grad: on`
//! beside default requests) never sharing a forward, as the
//! `x-debug-batch` answer headers show. (examples/serve's batching of a
//! failing model: serve/failing.rs.)

use super::*;

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
