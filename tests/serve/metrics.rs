//! `/metrics` of examples/serve: the library's counters, valid by
//! `promtool check metrics`.

use super::*;

/// The promtool to use: $TCH_SCOPE_PROMTOOL, or what
/// scripts/bootstrap-promtool.sh finds or fetches; Err is the reason.
pub(crate) fn promtool() -> Result<PathBuf, String> {
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

/// A 200, a 400 and a 504 on `/predict` and a 200 over the protocol:
/// each counted by route and status, with the batcher's counts (the
/// warm-up's forward among the inferences, the 504 expired uncomputed);
/// the text passes `promtool check metrics` (skipped, saying why, without
/// a promtool).
#[test]
fn metrics_pass_promtool_check_metrics() {
    let s = start_example(&mlp_flags(&["--workers", "1"]));
    let json = ("content-type", "application/json");
    // Some of each: a 200, a 400, a 504, a 200 over the protocol.
    assert_eq!(predict(&s.addr, None, &input(1, 32)).0, 200);
    assert_eq!(predict(&s.addr, None, "{").0, 400);
    assert_eq!(predict(&s.addr, Some("0"), &input(1, 32)).0, 504);
    let infer = serde_json::json!({"inputs": [{"name": "input__0", "datatype": "FP32",
        "shape": [1, 32], "data": vec![0.5f32; 32]}]});
    let (status, text) = http(
        &s.addr,
        "POST",
        "/v2/models/serve_mlp/infer",
        &[json],
        infer.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{text}");
    let (status, text) = http(&s.addr, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200);
    // The library's own counters (no exporter needed): answers by route
    // and status, the batcher's counts, connections.
    for needle in [
        "# TYPE serve_requests_total counter",
        "serve_requests_total{route=\"predict\",status=\"200\"} 1",
        "serve_requests_total{route=\"predict\",status=\"400\"} 1",
        "serve_requests_total{route=\"predict\",status=\"504\"} 1",
        "serve_requests_total{route=\"infer\",status=\"200\"} 1",
        "serve_batch_inferences_total{model=\"serve_mlp\"} 3",
        "serve_batch_expired_total{model=\"serve_mlp\"} 1",
        "serve_batch_workers_live{model=\"serve_mlp\"} 1",
        "serve_connections_accepted_total",
        "serve_connections_closed_total{reason=\"idle\"}",
    ] {
        assert!(text.contains(needle), "no {needle} in\n{text}");
    }

    promtool_check(&text);
}

/// `promtool check metrics` on `text` (skipped, with a note, without
/// promtool).
pub(super) fn promtool_check(text: &str) {
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
