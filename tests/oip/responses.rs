//! Responses we encode, parsed by tritonclient's parser.

use std::fmt::Write as _;

use serde_json::{Value, json};
use tch::{Kind, Tensor};
use tch_scope::serve::oip::{
    Datatype, EncodedResponse, InferRequest, ModelMetadata, OutputTensor, encode_outputs,
    encode_response,
};

use super::{hex, raw_bytes, run_python, scratch};

/// A tensor of `datatype` and `shape` from deterministic pseudo-random bits
/// (every value an element can hold: extremes, subnormals, -0.0, and NaNs
/// with payloads and infinities unless `finite`, which JSON cannot carry).
fn sample(datatype: Datatype, shape: &[i64], finite: bool, seed: u64) -> Tensor {
    let n: i64 = shape.iter().product();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let bytes: Vec<u8> = (0..n * 8)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[3]
        })
        .collect();
    let mut bytes = bytes[..usize::try_from(n).unwrap() * datatype.size()].to_vec();
    if datatype.is_float() {
        // The values a float encoding gets wrong first, at the front.
        let edges: &[u64] = match (datatype, finite) {
            (Datatype::Fp16, false) => &[0x7E01, 0xFC00, 0x8000, 0x0001, 0x7BFF],
            (Datatype::Fp16, true) => &[0x8000, 0x0001, 0x7BFF, 0xFBFF],
            (Datatype::Fp32, false) => &[0x7FC0_0001, 0xFF80_0000, 0x8000_0000, 0x1, 0x7F7F_FFFF],
            (Datatype::Fp32, true) => &[0x8000_0000, 0x1, 0x7F7F_FFFF, 0xFF7F_FFFF],
            (_, false) => &[
                0x7FF8_0000_0000_0001,
                0xFFF0_0000_0000_0000,
                1 << 63,
                0x1,
                0x7FEF_FFFF_FFFF_FFFF,
            ],
            (_, true) => &[1 << 63, 0x1, 0x7FEF_FFFF_FFFF_FFFF, 0xFFEF_FFFF_FFFF_FFFF],
        };
        for (chunk, edge) in bytes.chunks_exact_mut(datatype.size()).zip(edges) {
            chunk.copy_from_slice(&edge.to_le_bytes()[..datatype.size()]);
        }
    }
    let bytes = &bytes[..];
    match datatype {
        Datatype::Bool => Tensor::from_data_size(bytes, shape, Kind::Uint8)
            .remainder(2)
            .to_kind(Kind::Bool),
        d => {
            let t = Tensor::from_data_size(bytes, shape, d.kind());
            if d.is_float() && finite {
                t.nan_to_num(0.0, 0.0, 0.0)
            } else {
                t
            }
        }
    }
}

/// A response's name, its encoding, and the outputs it carries in order.
type Case = (String, EncodedResponse, Vec<(String, Tensor)>);

fn numpy_dtype(datatype: Datatype) -> &'static str {
    match datatype {
        Datatype::Bool => "|b1",
        Datatype::Uint8 => "|u1",
        Datatype::Int8 => "|i1",
        Datatype::Int16 => "<i2",
        Datatype::Int32 => "<i4",
        Datatype::Int64 => "<i8",
        Datatype::Fp16 => "<f2",
        Datatype::Fp32 => "<f4",
        Datatype::Fp64 => "<f8",
    }
}

/// Every datatype alone in JSON and in binary; all of them in one response,
/// binary and JSON alternating per output, with an empty and a 0-d tensor;
/// and a response encoded from a request's own choice of encodings. Each
/// output tritonclient parses has the datatype's numpy dtype, the tensor's
/// shape and bitwise its bytes.
#[test]
fn tritonclient_parses_our_responses_bitwise_json_binary_and_mixed() {
    let dir = scratch("responses");
    let mut cases: Vec<Case> = Vec::new();
    let shape = [3i64, 4];
    for (seed, &d) in (1u64..).zip(Datatype::all()) {
        for binary in [false, true] {
            let t = sample(d, &shape, !binary, seed);
            let name = format!(
                "{}_{}",
                d.as_str().to_lowercase(),
                if binary { "binary" } else { "json" }
            );
            let out = OutputTensor {
                name: "output__0",
                tensor: &t,
                binary,
            };
            let encoded = encode_outputs("m", Some("1"), Some(&name), &[out]).unwrap();
            assert_eq!(encoded.header_length.is_some(), binary, "{name}");
            cases.push((name, encoded, vec![("output__0".to_owned(), t)]));
        }
    }
    let mut mixed: Vec<(String, Tensor)> = Datatype::all()
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            (
                format!("output__{i}"),
                sample(d, &[2, 5], i % 2 == 1, 100 + i as u64),
            )
        })
        .collect();
    mixed.push(("output__9".into(), sample(Datatype::Fp32, &[0, 3], true, 7)));
    mixed.push(("output__10".into(), sample(Datatype::Int64, &[], true, 8)));
    mixed.push(("output__11".into(), sample(Datatype::Fp64, &[0], true, 9)));
    let outs: Vec<OutputTensor<'_>> = mixed
        .iter()
        .enumerate()
        .map(|(i, (name, tensor))| OutputTensor {
            name,
            tensor,
            binary: i % 2 == 0 || i == 11,
        })
        .collect();
    let encoded = encode_outputs("m", Some("1"), Some("mixed"), &outs).unwrap();
    cases.push(("mixed".into(), encoded, mixed));

    // Through encode_response: the request asks for output__1 in JSON and
    // output__0 in binary, in that order.
    let model = ModelMetadata::new(
        "m",
        "p",
        [],
        [(Datatype::Fp32, vec![-1, 2]), (Datatype::Int32, vec![-1])],
    );
    let request = br#"{"id":"chosen","inputs":[],"outputs":[{"name":"output__1","parameters":{"binary_data":false}},
        {"name":"output__0","parameters":{"binary_data":true}}]}"#;
    let request = InferRequest::parse(request, None).unwrap();
    let (y0, y1) = (
        sample(Datatype::Fp32, &[4, 2], false, 11),
        sample(Datatype::Int32, &[4], true, 12),
    );
    let encoded =
        encode_response(&model, &request, &[y0.shallow_clone(), y1.shallow_clone()]).unwrap();
    cases.push((
        "chosen".into(),
        encoded,
        vec![("output__1".into(), y1), ("output__0".into(), y0)],
    ));

    let mut manifest = Vec::new();
    for (name, encoded, outputs) in &cases {
        std::fs::write(dir.join(format!("{name}.body")), &encoded.body).unwrap();
        let names: Vec<&str> = outputs.iter().map(|(n, _)| n.as_str()).collect();
        manifest
            .push(json!({"name": name, "header_length": encoded.header_length, "outputs": names}));
    }
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec(&manifest).unwrap(),
    )
    .unwrap();
    if run_python("responses", "tritonclient_responses.py", &dir).is_none() {
        return;
    }
    let parsed: Value =
        serde_json::from_slice(&std::fs::read(dir.join("parsed.json")).unwrap()).unwrap();
    let mut failures = String::new();
    for (name, _, outputs) in &cases {
        let got = &parsed[name];
        assert_eq!(got["model_name"], "m", "{name}");
        assert_eq!(got["id"].as_str(), Some(name.as_str()), "{name}");
        for ((out, tensor), parsed) in outputs.iter().zip(got["outputs"].as_array().unwrap()) {
            let d = Datatype::from_kind(tensor.kind()).unwrap();
            let want = (numpy_dtype(d), tensor.size(), hex(&raw_bytes(tensor)));
            let shape: Vec<i64> = serde_json::from_value(parsed["shape"].clone()).unwrap();
            let have = (
                parsed["dtype"].as_str().unwrap(),
                shape,
                parsed["hex"].as_str().unwrap().to_owned(),
            );
            if have != want {
                let _ = writeln!(
                    failures,
                    "{name}/{out}: tritonclient read {have:?}, we sent {want:?}"
                );
            }
        }
    }
    assert!(failures.is_empty(), "{failures}");
}
