//! What only the tests' own server (`serve-lab --debug`) can say: each
//! worker's state and the forwards it ran (`GET /debug/workers`).

use super::*;

/// Every worker's state now is what it was at its start: grad mode on,
/// inference mode off (the batched server reads it inside a forward, which
/// the batcher runs in inference mode: grad mode off, inference mode on),
/// the model all in eval mode, operators running.
pub(crate) fn assert_workers_as_before(addr: &str, workers: usize) {
    assert_workers_with(addr, workers, |modes| {
        let modes = modes.as_array().expect("modes");
        !modes.is_empty() && modes.iter().all(|m| m == false)
    });
}

/// As [`assert_workers_as_before`], the model's modes (`model_training`)
/// checked by `modes_ok`.
pub(crate) fn assert_workers_with(
    addr: &str,
    workers: usize,
    modes_ok: impl Fn(&serde_json::Value) -> bool,
) {
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
        assert!(modes_ok(&w["now"]["model_training"]), "{w}");
    }
}

/// The forwards the workers ran so far (`/debug/workers`).
pub(crate) fn jobs_done(addr: &str) -> u64 {
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
