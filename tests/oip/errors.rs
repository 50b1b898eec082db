//! Bad requests, most built by tritonclient: a 400 and a clear `{"error"}`.

use serde_json::Value;
use tch_scope::serve::oip::{
    Datatype, InferRequest, ModelMetadata, OipError, PLATFORM_TORCHSCRIPT,
};

use super::{run_python, scratch};

/// What each bad body of tests/oip/tritonclient_requests.py must say.
const EXPECTED: &[(&str, &str)] = &[
    ("wrong_name", "unknown input \"x\""),
    (
        "wrong_datatype",
        "input \"input__0\" is FP32, the request gives FP64",
    ),
    (
        "wrong_shape",
        "input \"input__0\" has shape [-1, 4] (-1: any size), the request gives [2, 5]",
    ),
    (
        "two_inputs",
        "takes 1 input(s) (input__0), the request gives 2",
    ),
    (
        "unsupported_datatype",
        "datatype \"UINT32\" is not supported",
    ),
    ("bytes_datatype", "libtorch has no string tensors"),
    ("truncated_binary", "only 29 bytes of binary data are left"),
    ("header_past_body", "past the body"),
    ("binary_without_header", "the request's JSON is invalid"),
    ("invalid_json", "the request's JSON is invalid"),
    ("not_utf8", "the request's JSON is invalid"),
    (
        "json_count_mismatch",
        "data holds 8 elements, but shape [3, 4] has 12",
    ),
];

/// Wrong name, datatype, shape and input count against the model's
/// metadata; unsupported datatypes; binary data cut short, a header length
/// past the body, binary data with no header length, JSON cut short, a
/// non-UTF-8 string, a data count that does not fit the shape: each a 400
/// whose `{"error"}` body says what is wrong. Another model's name is a 404.
#[test]
fn bad_requests_are_400s_with_an_error_body_saying_why() {
    let model = ModelMetadata::new(
        "mlp",
        PLATFORM_TORCHSCRIPT,
        [(Datatype::Fp32, vec![-1, 4])],
        [(Datatype::Fp32, vec![-1, 2])],
    );
    let e = model.check_model("other", None).unwrap_err();
    assert_eq!(
        (e.status(), e.message()),
        (
            404,
            "unknown model \"other\": this server does not serve it"
        )
    );

    let dir = scratch("errors");
    if run_python("errors", "tritonclient_requests.py", &dir).is_none() {
        return;
    }
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let bad = manifest["bad"].as_array().unwrap();
    assert_eq!(bad.len(), EXPECTED.len());
    for (case, (name, want)) in bad.iter().zip(EXPECTED) {
        assert_eq!(case["name"].as_str(), Some(*name));
        let body = std::fs::read(dir.join(format!("{name}.body"))).unwrap();
        let header_length = case["header_length"]
            .as_u64()
            .map(|n| usize::try_from(n).unwrap());
        let e: OipError = match InferRequest::parse(&body, header_length) {
            Err(e) => e,
            Ok(mut req) => model.take_inputs(&mut req).map(|_| ()).expect_err(name),
        };
        assert_eq!(e.status(), 400, "{name}: {e}");
        assert!(
            e.message().contains(want),
            "{name}: {:?} does not say {want:?}",
            e.message()
        );
        let body: Value = serde_json::from_slice(&e.body()).unwrap();
        assert_eq!(body, serde_json::json!({ "error": e.message() }), "{name}");
    }
}
