//! Short load runs by examples/load (300 requests, 16 at a time) with
//! every output right, against examples/serve (batched and unbatched, a
//! TorchScript file and a `.pt2` package) and the plain server
//! (`serve-lab --plain`).

use super::pt2::packages;
use super::*;

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
/// `extra` flags, its outputs within `tolerance` of load's (0: bitwise):
/// examples/serve unless `lab` (serve-lab, whose `/debug/workers` `load`
/// and this test check every worker against its state at start).
fn short_load(lab: Option<bool>, extra: &[&str], tolerance: &str) {
    let workers = 2;
    let mut flags = vec!["--workers", "2", "--queue", "64", "--body-limit", "65536"];
    flags.extend_from_slice(extra);
    let s = match lab {
        Some(plain) => start(plain, &flags),
        None => start_example(&mlp_flags(&flags)),
    };
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
    if lab.is_some() {
        assert_eq!(n("workers_checked"), workers as u64, "{v}");
        assert_workers_as_before(&s.addr, workers);
    } else {
        // The library has no debug route: its workers are all still
        // running, and it is ready.
        let text = metrics_text(&s.addr);
        let live = "serve_batch_workers_live{model=\"serve_mlp\"} 2";
        assert!(text.contains(live), "no {live} in\n{text}");
        assert_eq!(http(&s.addr, "GET", "/v2/health/ready", &[], b"").0, 200);
    }
}

/// The batching server: a row computed in a batch may differ from the
/// row alone in its last bits.
#[test]
fn short_load_run_on_the_tch_scope_server_is_right() {
    short_load(None, &[], "1e-5");
}

#[test]
fn short_load_run_on_the_unbatched_tch_scope_server_is_bitwise_right() {
    short_load(None, &["--max-batch", "1"], "0");
}

#[test]
fn short_load_run_on_the_plain_server_is_right() {
    short_load(Some(true), &[], "0");
}

/// `serve --model serve_mlp.pt2` (the default model's MLP exported by
/// scripts/export_pt2.py with a dynamic batch): its answer to the input the
/// script recorded is within 1e-5 of eager PyTorch in eval mode, a batch of
/// 1 (the warm-up's) and a wrong feature count are answered as for
/// TorchScript (200, 422), every worker is as at its start (no model modes
/// to report), and a short load run (its references computed by `load`
/// with `tch_scope::aoti::Package`) is right: bitwise on the plain
/// server, within 1e-5 on the tch-scope one (it batches).
/// examples/serve (`plain` false) declares the package's input shape in
/// its metadata and refuses a wrong feature count by it (400, before the
/// model); serve-lab's plain server runs the model on it (422).
fn serves_a_pt2_package(plain: bool) {
    let Some(dir) = packages() else { return };
    let model = dir.join("serve_mlp.pt2");
    let model = model.to_str().expect("a UTF-8 path");
    let j: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("serve_mlp.json")).expect("serve_mlp.json"),
    )
    .expect("JSON");
    let workers = 2;
    let flags = [
        "--model",
        model,
        "--workers",
        "2",
        "--queue",
        "64",
        "--body-limit",
        "65536",
    ];
    let s = if plain {
        start(true, &flags)
    } else {
        start_example(&flags)
    };

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
    let got = floats_of_json(&v["data"]);
    assert_eq!(got.len(), eager.len(), "{v}");
    for (i, (g, e)) in got.iter().zip(&eager).enumerate() {
        assert!((g - e).abs() <= 1e-5, "data[{i}]: {g} against eager {e}");
    }

    let (status, v) = predict(&s.addr, None, &input(2, 16));
    if plain {
        assert_eq!(status, 422, "{v}");
        // `Package::run` checks the input against the package's own
        // metadata, and says which input and what the package takes.
        assert!(
            error(&v).contains("input 0") && error(&v).contains("the package takes 32"),
            "{v}"
        );
    } else {
        assert_eq!(status, 400, "{v}");
        assert!(error(&v).contains("[-1, 32]"), "{v}");
    }

    // The tch-scope server batches: its rows within 1e-5 of load's.
    let tolerance = if plain { "0" } else { "1e-5" };
    let v = load_json(&s.addr, &["--model", model], tolerance);
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
    assert_eq!(n("requests"), 300, "{v}");
    assert_eq!(n("wrong"), 0, "{v}");
    assert_eq!(n("errors"), 0, "{v}");
    assert_eq!(n("malformed"), n("sent_malformed"), "{v}");
    assert!(n("ok") >= n("sent_valid"), "{v}");
    if !plain {
        let text = metrics_text(&s.addr);
        let live = "serve_batch_workers_live{model=\"serve_mlp\"} 2";
        assert!(text.contains(live), "no {live} in\n{text}");
        return;
    }
    assert_eq!(n("workers_checked"), workers, "{v}");

    // A package has no module modes to report.
    assert_workers_with(&s.addr, usize::try_from(workers).unwrap(), |modes| {
        *modes == serde_json::json!([])
    });
}

#[test]
fn tch_scope_server_serves_a_pt2_package() {
    serves_a_pt2_package(false);
}

#[test]
fn plain_server_serves_a_pt2_package() {
    serves_a_pt2_package(true);
}
