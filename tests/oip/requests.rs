//! Request bodies from tritonclient's builder, decoded.

use std::time::Duration;

use serde_json::Value;
use tch_scope::serve::oip::{Datatype, InferRequest};

use super::{hex, raw_bytes, run_python, scratch};

/// Every datatype, JSON and binary, and one request mixing both over six
/// inputs (an empty and a 0-d tensor among them): each input decodes to a
/// tensor of the datatype's kind, the shape given and bitwise the numpy
/// array's bytes; the id, timeout and the outputs' encoding come through.
#[test]
fn tritonclient_requests_decode_bitwise_for_every_datatype_and_encoding() {
    let dir = scratch("requests");
    if run_python("requests", "tritonclient_requests.py", &dir).is_none() {
        return;
    }
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let cases = manifest["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2 * Datatype::all().len() + 1);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let body = std::fs::read(dir.join(format!("{name}.body"))).unwrap();
        let header_length = case["header_length"]
            .as_u64()
            .map(|n| usize::try_from(n).unwrap());
        let req =
            InferRequest::parse(&body, header_length).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(req.id.as_deref(), case["id"].as_str(), "{name}");
        assert_eq!(
            req.timeout,
            case["timeout_us"].as_u64().map(Duration::from_micros),
            "{name}"
        );
        let binary_output = case["binary_output"].as_bool().unwrap();
        assert_eq!(req.binary_output("output__0"), binary_output, "{name}");
        let want = case["inputs"].as_array().unwrap();
        assert_eq!(req.inputs.len(), want.len(), "{name}");
        for (got, want) in req.inputs.iter().zip(want) {
            let what = format!("{name}/{}", got.name);
            assert_eq!(got.name, want["name"].as_str().unwrap(), "{what}");
            let datatype: Datatype = want["datatype"].as_str().unwrap().parse().unwrap();
            assert_eq!(got.datatype, datatype, "{what}");
            assert_eq!(got.tensor.kind(), datatype.kind(), "{what}");
            let shape: Vec<i64> = serde_json::from_value(want["shape"].clone()).unwrap();
            assert_eq!(got.shape, shape, "{what}");
            assert_eq!(got.tensor.size(), shape, "{what}");
            assert_eq!(
                hex(&raw_bytes(&got.tensor)),
                want["hex"].as_str().unwrap(),
                "{what}: not bitwise"
            );
        }
    }
}
