//! The codec against itself and hand-written bodies; `tests/oip.rs` checks
//! it against `tritonclient`.

use tch::{Kind, Tensor};

use super::*;

fn model() -> ModelMetadata {
    ModelMetadata::new(
        "mlp",
        PLATFORM_TORCHSCRIPT,
        [(Datatype::Fp32, vec![-1, 3])],
        [(Datatype::Fp32, vec![-1, 2]), (Datatype::Int64, vec![-1])],
    )
}

fn err(body: &[u8], header: Option<usize>) -> OipError {
    InferRequest::parse(body, header).expect_err("the body is refused")
}

#[test]
fn oip_names_round_trip_and_refuse_other_spellings() {
    assert_eq!(input_name(0), "input__0");
    assert_eq!(output_name(12), "output__12");
    assert_eq!(input_index("input__7"), Some(7));
    assert_eq!(output_index("output__0"), Some(0));
    for bad in ["input__", "input__01", "input__+1", "input_1", "output__0"] {
        assert_eq!(input_index(bad), None, "{bad}");
    }
}

#[test]
fn oip_datatypes_map_to_kinds_and_refuse_the_rest_by_reason() {
    for &d in Datatype::all() {
        assert_eq!(d.as_str().parse::<Datatype>().unwrap(), d);
        assert_eq!(Datatype::from_kind(d.kind()).unwrap(), d);
    }
    let e = "BYTES".parse::<Datatype>().unwrap_err();
    assert_eq!(e.status(), 400);
    assert!(e.message().contains("string tensors"), "{e}");
    assert!(
        "UINT32"
            .parse::<Datatype>()
            .unwrap_err()
            .message()
            .contains("unsigned")
    );
    assert!(
        "FLOAT"
            .parse::<Datatype>()
            .unwrap_err()
            .message()
            .contains("not a datatype")
    );
    assert_eq!(
        Datatype::from_kind(Kind::ComplexFloat)
            .unwrap_err()
            .status(),
        500
    );
}

#[test]
fn oip_json_request_reads_nested_and_flat_data() {
    let body = br#"{"id":"r1","parameters":{"timeout":2500},"inputs":[
        {"name":"input__0","shape":[2,3],"datatype":"FP32","data":[[1,2.5,-3],[4e0,5,0.1]]}],
        "outputs":[{"name":"output__1","parameters":{"binary_data":true}}]}"#;
    let mut req = InferRequest::parse(body, None).unwrap();
    assert_eq!(req.id.as_deref(), Some("r1"));
    assert_eq!(req.timeout, Some(std::time::Duration::from_micros(2500)));
    assert!(req.binary_output("output__1"));
    assert!(!req.binary_output("output__0"));
    let inputs = model().take_inputs(&mut req).unwrap();
    let want = Tensor::from_slice(&[1f32, 2.5, -3.0, 4.0, 5.0, 0.1]).reshape([2, 3]);
    assert!(inputs[0].equal(&want));
}

#[test]
fn oip_binary_request_and_response_round_trip_bitwise() {
    let x = Tensor::from_slice(&[f32::NAN, -0.0, 1e-40, f32::INFINITY, 7.0, -1.5]).reshape([2, 3]);
    let mut bytes = vec![0u8; 24];
    x.copy_data_u8(&mut bytes, 6);
    let header = br#"{"inputs":[{"name":"input__0","shape":[2,3],"datatype":"FP32","parameters":{"binary_data_size":24}}]}"#;
    let body = [&header[..], &bytes].concat();
    let req = InferRequest::parse(&body, Some(header.len())).unwrap();
    let got = &req.inputs[0].tensor;
    let as_int = |t: &Tensor| Vec::<i32>::try_from(&t.view_dtype(Kind::Int).reshape([-1])).unwrap();
    assert_eq!(as_int(got), as_int(&x));

    // The same tensor back out in binary: the very bytes that came in.
    let out = encode_outputs(
        "m",
        None,
        None,
        &[OutputTensor {
            name: "output__0",
            tensor: got,
            binary: true,
        }],
    )
    .unwrap();
    let n = out.header_length.unwrap();
    assert_eq!(&out.body[n..], &bytes[..]);
}

#[test]
fn oip_json_response_refuses_nan_and_binary_carries_it() {
    let req = InferRequest::parse(br#"{"inputs":[]}"#, None).unwrap();
    let x = Tensor::from_slice(&[f32::NAN, 1.0]).reshape([1, 2]);
    let ids = Tensor::from_slice(&[3i64]);
    let m = ModelMetadata::new(
        "mlp",
        "p",
        [],
        [(Datatype::Fp32, vec![-1, 2]), (Datatype::Int64, vec![-1])],
    );
    let e = encode_response(&m, &req, &[x.shallow_clone(), ids.shallow_clone()]).unwrap_err();
    assert_eq!(e.status(), 400);
    assert!(e.message().contains("binary"), "{e}");
    let req = InferRequest::parse(
        br#"{"inputs":[],"parameters":{"binary_data_output":true}}"#,
        None,
    )
    .unwrap();
    let out = encode_response(&m, &req, &[x, ids]).unwrap();
    let n = out.header_length.unwrap();
    assert_eq!(out.body.len(), n + 8 + 8);
    assert_eq!(out.content_type(), "application/octet-stream");
    let head: serde_json::Value = serde_json::from_slice(&out.body[..n]).unwrap();
    assert_eq!(head["outputs"][0]["parameters"]["binary_data_size"], 8);
    assert_eq!(head["outputs"][1]["datatype"], "INT64");
    assert_eq!(head["model_version"], "1");
}

#[test]
fn oip_bad_requests_are_400s_naming_the_fault() {
    let cases: &[(&[u8], Option<usize>, &str)] = &[
        (b"{\"inputs\":[", None, "invalid"),
        (b"\xff\xfe", None, "invalid"),
        (b"{}", Some(10), "past the body"),
        (br#"{"inputs":[{"name":"a","shape":[2],"datatype":"FP32","data":[1]}]}"#, None, "holds 1 elements"),
        (br#"{"inputs":[{"name":"a","shape":[1],"datatype":"INT8","data":[300]}]}"#, None, "out of the range"),
        (br#"{"inputs":[{"name":"a","shape":[1],"datatype":"INT32","data":[1.5]}]}"#, None, "expects an integer"),
        (br#"{"inputs":[{"name":"a","shape":[1],"datatype":"BOOL","data":[1]}]}"#, None, "true or false"),
        (br#"{"inputs":[{"name":"a","shape":[-1],"datatype":"FP32","data":[]}]}"#, None, "negative"),
        (br#"{"inputs":[{"name":"a","shape":[1],"datatype":"FP32"}]}"#, None, "neither"),
        (br#"{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}"#, None, "no Inference-Header"),
        (br#"{"inputs":[{"name":"a","shape":[1],"datatype":"BYTES","data":["x"]}]}"#, None, "BYTES"),
        (br#"{"inputs":[],"parameters":{"timeout":-1}}"#, None, "timeout"),
        (br#"{"inputs":[],"parameters":{"sequence_id":4}}"#, None, "sequences"),
    ];
    for (body, header, want) in cases {
        let e = err(body, *header);
        assert_eq!(e.status(), 400, "{e}");
        assert!(
            e.message().contains(want),
            "{:?}: {e}",
            String::from_utf8_lossy(body)
        );
        let parsed: serde_json::Value = serde_json::from_slice(&e.body()).unwrap();
        assert_eq!(parsed["error"], e.message());
    }
    let header = br#"{"inputs":[{"name":"a","shape":[2],"datatype":"BOOL","parameters":{"binary_data_size":2}}]}"#;
    for (tail, want) in [
        (&[1u8][..], "only 1 bytes"),
        (&[1, 2][..], "not 0 or 1"),
        (&[1, 0, 0][..], "past the inputs"),
    ] {
        let e = err(&[&header[..], tail].concat(), Some(header.len()));
        assert!(e.message().contains(want), "{e}");
    }
}

#[test]
fn oip_validation_names_the_input_and_404s_another_model() {
    let m = model();
    let check = |body: &[u8]| {
        m.validate(&InferRequest::parse(body, None).unwrap())
            .unwrap_err()
    };
    let e = check(br#"{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}"#);
    assert!(e.message().contains("unknown input \"x\""), "{e}");
    let e = check(
        br#"{"inputs":[{"name":"input__0","shape":[1,3],"datatype":"FP64","data":[1,2,3]}]}"#,
    );
    assert!(
        e.message().contains("is FP32, the request gives FP64"),
        "{e}"
    );
    let e =
        check(br#"{"inputs":[{"name":"input__0","shape":[1,2],"datatype":"FP32","data":[1,2]}]}"#);
    assert!(e.message().contains("shape"), "{e}");
    let e = check(br#"{"inputs":[]}"#);
    assert!(e.message().contains("takes 1 input"), "{e}");
    let e = check(br#"{"inputs":[{"name":"input__0","shape":[1,3],"datatype":"FP32","data":[1,2,3]}],"outputs":[{"name":"y"}]}"#);
    assert!(e.message().contains("unknown output \"y\""), "{e}");
    assert_eq!(m.check_model("other", None).unwrap_err().status(), 404);
    assert_eq!(m.check_model("mlp", Some("2")).unwrap_err().status(), 404);
    m.check_model("mlp", Some("1")).unwrap();
    let meta: serde_json::Value = serde_json::from_slice(&m.to_json()).unwrap();
    assert_eq!(
        meta["inputs"][0],
        serde_json::json!({"name": "input__0", "datatype": "FP32", "shape": [-1, 3]})
    );
    assert_eq!(meta["platform"], "pytorch_libtorch");
}
