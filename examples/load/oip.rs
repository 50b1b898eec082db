//! The Open Inference Protocol (KServe v2) as `load` speaks it:
//! `POST /v2/models/{name}/infer` with JSON tensors or with the binary
//! tensor data extension (a JSON header of `Inference-Header-Content-Length`
//! bytes, then each tensor's raw little-endian bytes), and the answer's
//! first output read back either way.

use axum::body::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::floats;
use crate::requests::BODY_LIMIT;

/// The model's input and output (Triton's PyTorch-backend names).
pub const INPUT: &str = "input__0";
pub const OUTPUT: &str = "output__0";

/// `{"inputs": [{input__0, shape, FP32, data}]}`.
pub fn json_request(shape: &[usize], data: &[f32]) -> Bytes {
    json_named(INPUT, shape, "FP32", data)
}

fn json_named(name: &str, shape: &[usize], datatype: &str, data: &[f32]) -> Bytes {
    let v = serde_json::json!({
        "inputs": [{"name": name, "shape": shape, "datatype": datatype, "data": data}],
    });
    Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
}

/// The JSON header of a binary request: one FP32 input of `bytes` bytes
/// and `output__0` asked for as binary data.
fn binary_header(name: &str, shape: &[usize], bytes: usize) -> Vec<u8> {
    let v = serde_json::json!({
        "inputs": [{"name": name, "shape": shape, "datatype": "FP32",
                    "parameters": {"binary_data_size": bytes}}],
        "outputs": [{"name": OUTPUT, "parameters": {"binary_data": true}}],
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

fn with_data(header: Vec<u8>, data: &[f32]) -> (Bytes, usize) {
    let n = header.len();
    let mut body = header;
    body.reserve(4 * data.len());
    for x in data {
        body.extend_from_slice(&x.to_le_bytes());
    }
    (Bytes::from(body), n)
}

/// A binary request: its body and the length of its JSON header.
pub fn binary_request(shape: &[usize], data: &[f32]) -> (Bytes, usize) {
    with_data(binary_header(INPUT, shape, 4 * data.len()), data)
}

/// Requests every server of the protocol answers 400 (or 413/422), each
/// with its header length: a header length past the body, a header that
/// is not JSON, data that does not fill the shape, an unknown input, a
/// body over the servers' limit.
pub fn malformed_binary(f: usize) -> Vec<(Bytes, Option<usize>)> {
    let row = vec![0.25f32; f];
    let (ok, _) = binary_request(&[1, f], &row);
    let past_end = ok.len() + 10;
    let not_json = with_data(b"{\"inputs\": [".to_vec(), &row);
    let short = with_data(binary_header(INPUT, &[3, f], 4 * f), &row);
    let unknown = with_data(binary_header("input__7", &[1, f], 4 * f), &row);
    let big = vec![0.125f32; (BODY_LIMIT / 4 / f + 1) * f];
    let over = binary_request(&[big.len() / f, f], &big);
    vec![
        (ok, Some(past_end)),
        (not_json.0, Some(not_json.1)),
        (short.0, Some(short.1)),
        (unknown.0, Some(unknown.1)),
        (over.0, Some(over.1)),
    ]
}

/// The same for JSON tensors: cut-off JSON, data that does not fill the
/// shape, a string among the numbers, an unknown input, a body over the
/// limit.
pub fn malformed_json(f: usize) -> Vec<(Bytes, Option<usize>)> {
    let row = vec![0.25f32; f];
    let big = vec![0.125f32; (BODY_LIMIT / 5 / f + 1) * f];
    vec![
        Bytes::from(format!(
            "{{\"inputs\": [{{\"name\": \"{INPUT}\", \"shape\": [1, {f}], \"datatype\": \"FP32\", \"data\": [1.0"
        )),
        json_named(INPUT, &[3, f], "FP32", &row),
        Bytes::from(format!(
            "{{\"inputs\": [{{\"name\": \"{INPUT}\", \"shape\": [1, 2], \"datatype\": \"FP32\", \"data\": [1.0, \"two\"]}}]}}"
        )),
        json_named("input__7", &[1, f], "FP32", &row),
        json_named(INPUT, &[big.len() / f, f], "FP32", &big),
    ]
    .into_iter()
    .map(|b| (b, None))
    .collect()
}

#[derive(Deserialize)]
struct Header<'a> {
    #[serde(borrow)]
    outputs: Vec<Output<'a>>,
}

#[derive(Deserialize)]
struct Output<'a> {
    name: String,
    datatype: String,
    #[serde(default)]
    parameters: Option<Parameters>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Parameters {
    binary_data_size: Option<usize>,
}

/// The floats of `output__0` in an answer: `header_len` is the answer's
/// `Inference-Header-Content-Length` (binary data after the JSON header),
/// `None` for an answer all JSON.
pub fn output(body: &[u8], header_len: Option<usize>) -> Result<Vec<f32>, String> {
    let n = header_len.unwrap_or(body.len());
    let head = body
        .get(..n)
        .ok_or_else(|| format!("a header of {n} bytes in a body of {}", body.len()))?;
    let h: Header<'_> = serde_json::from_slice(head).map_err(|e| e.to_string())?;
    // Binary outputs lie after the header in the order of `outputs`.
    let mut at = n;
    for o in &h.outputs {
        let size = o.parameters.as_ref().and_then(|p| p.binary_data_size);
        if o.name != OUTPUT {
            at += size.unwrap_or(0);
            continue;
        }
        if o.datatype != "FP32" {
            return Err(format!("{OUTPUT} is {}, not FP32", o.datatype));
        }
        return match (size, o.data) {
            (Some(size), _) => {
                let raw = body
                    .get(at..at + size)
                    .ok_or_else(|| format!("{size} bytes at {at} in a body of {}", body.len()))?;
                if size % 4 != 0 {
                    return Err(format!("{size} bytes of FP32"));
                }
                Ok(raw
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect())
            }
            (None, Some(data)) => floats::parse_f32_array(data.get()),
            (None, None) => Err(format!("{OUTPUT} has neither data nor binary data")),
        };
    }
    Err(format!("no {OUTPUT} in the answer"))
}
