//! The requests `load` sends: the valid inputs with their reference
//! outputs, encoded for each protocol, the malformed bodies, and the mix
//! (fixed by the request's index).

use std::path::Path;

use axum::body::Bytes;
use serde::{Deserialize, Serialize};
use tch::{CModule, Kind, Tensor};
use tch_scope::aoti::Package;

use crate::oip;

/// The features of the default model's input.
const FEATURES: usize = 32;
/// Distinct valid inputs (each with its reference output).
const POOL: usize = 256;
/// The body limit the spawned servers get (a malformed kind goes over it).
pub const BODY_LIMIT: usize = 65_536;

/// How a request and its answer are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The server's own JSON: `POST /predict {"shape", "data"}`.
    Predict,
    /// The Open Inference Protocol with JSON tensors:
    /// `POST /v2/models/{name}/infer {"inputs": [{… "data"}]}`.
    V2Json,
    /// The Open Inference Protocol with the binary tensor data extension:
    /// a JSON header, then the raw little-endian floats, both ways.
    V2Binary,
}

impl Protocol {
    /// The name printed beside each server's line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Predict => "predict-json",
            Self::V2Json => "v2-json",
            Self::V2Binary => "v2-binary",
        }
    }
}

pub fn mix(mut x: u64) -> u64 {
    // splitmix64
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Valid,
    Tight,
    Malformed,
}

/// One request: its body and, for the binary protocol, the length of its
/// JSON header (`Inference-Header-Content-Length`).
pub struct Req {
    pub class: Class,
    /// The pool input (valid and tight requests).
    pub pool: usize,
    pub deadline_ms: u64,
    pub body: Bytes,
    pub header_len: Option<usize>,
}

/// One encoding of every input and of the malformed requests.
#[derive(Default)]
pub struct Encoded {
    /// Each valid input's body (and binary header length).
    pub bodies: Vec<(Bytes, Option<usize>)>,
    pub malformed: Vec<(Bytes, Option<usize>)>,
}

pub struct Pool {
    /// Floats per row.
    pub features: usize,
    /// Floats per output row (the reference's).
    pub outputs: usize,
    pub expected: Vec<Vec<f32>>,
    pub predict: Encoded,
    pub v2_json: Encoded,
    pub v2_binary: Encoded,
}

impl Pool {
    pub fn encoded(&self, protocol: Protocol) -> &Encoded {
        match protocol {
            Protocol::Predict => &self.predict,
            Protocol::V2Json => &self.v2_json,
            Protocol::V2Binary => &self.v2_binary,
        }
    }
}

pub fn json_body(shape: &[usize], data: &[f32]) -> Bytes {
    #[derive(Serialize)]
    struct Body<'a> {
        shape: &'a [usize],
        data: &'a [f32],
    }
    Bytes::from(serde_json::to_vec(&Body { shape, data }).unwrap_or_default())
}

/// Whether `path` names an AOTInductor package (as `serve` decides).
pub fn is_package(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("pt2"))
}

/// The model, loaded here for the reference outputs.
enum Reference {
    Script(CModule),
    Package(Package),
}

impl Reference {
    fn load(model: &Path) -> Result<Self, String> {
        let fail = |e: String| format!("cannot load {}: {e}", model.display());
        if is_package(model) {
            Package::options()
                .runners(1)
                .load(model)
                .map(Self::Package)
                .map_err(|e| fail(e.to_string()))
        } else {
            let mut m = CModule::load(model).map_err(|e| fail(e.to_string()))?;
            m.set_eval();
            Ok(Self::Script(m))
        }
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor, String> {
        match self {
            Self::Script(m) => m.forward_ts(&[x]).map_err(|e| e.to_string()),
            Self::Package(p) => {
                let mut ys = p.run(&[x]).map_err(|e| e.to_string())?;
                if ys.len() == 1 {
                    Ok(ys.remove(0))
                } else {
                    Err(format!(
                        "the package returned {} tensors, not one",
                        ys.len()
                    ))
                }
            }
        }
    }
}

/// PyTorch's rows for a model (`scripts/export_models.py load_mlp`).
#[derive(Deserialize)]
struct PyTorchRows {
    features: usize,
    inputs: Vec<Vec<f32>>,
    outputs: Vec<Vec<f32>>,
}

/// The valid inputs (shape and data), each with its reference output:
/// from `reference` (single rows, PyTorch's outputs), else generated here
/// with the model's own outputs, one at a time.
type Inputs = (usize, Vec<(Vec<usize>, Vec<f32>)>, Vec<Vec<f32>>);

fn inputs(model: &Path, reference: Option<&Path>) -> Result<Inputs, String> {
    let Some(path) = reference else {
        return generated(model);
    };
    let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let r: PyTorchRows =
        serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let rows_fit = r.inputs.iter().all(|x| x.len() == r.features);
    if r.inputs.is_empty() || r.inputs.len() != r.outputs.len() || !rows_fit {
        return Err(format!(
            "{}: needs as many `outputs` as `inputs`, each input of `features` floats",
            path.display()
        ));
    }
    let f = r.features;
    let xs = r.inputs.into_iter().map(|x| (vec![1, f], x)).collect();
    Ok((f, xs, r.outputs))
}

/// Every input in every encoding, and the malformed requests of each.
pub fn pool(model: &Path, reference: Option<&Path>) -> Result<Pool, String> {
    let (f, xs, expected) = inputs(model, reference)?;
    let outputs = expected[0].len() / xs[0].0[0].max(1);
    let ones = vec![0.25f32; 4 * f];
    let big = vec![0.125f32; (BODY_LIMIT / 5 / f + 1) * f];
    let predict = Encoded {
        bodies: xs.iter().map(|(s, x)| (json_body(s, x), None)).collect(),
        malformed: vec![
            Bytes::from(format!("{{\"shape\": [1, {f}], \"data\": [1.0, 2.0")),
            json_body(&[3, f], &ones),
            // The right number of values in a shape the model refuses (422).
            json_body(&[4 * f / 16, 16], &ones),
            Bytes::from_static(b"{\"shape\": [1, 2], \"data\": [1.0, \"two\"]}"),
            json_body(&[big.len() / f, f], &big),
        ]
        .into_iter()
        .map(|b| (b, None))
        .collect(),
    };
    let v2_json = Encoded {
        bodies: xs
            .iter()
            .map(|(s, x)| (oip::json_request(s, x), None))
            .collect(),
        malformed: oip::malformed_json(f),
    };
    let v2_binary = Encoded {
        bodies: xs
            .iter()
            .map(|(s, x)| {
                let (b, h) = oip::binary_request(s, x);
                (b, Some(h))
            })
            .collect(),
        malformed: oip::malformed_binary(f),
    };
    Ok(Pool {
        features: f,
        outputs,
        expected,
        predict,
        v2_json,
        v2_binary,
    })
}

/// Inputs of 1 to 8 rows of [`FEATURES`], and the model's output for each,
/// computed here, one at a time.
fn generated(model: &Path) -> Result<Inputs, String> {
    tch::set_num_threads(1);
    let m = Reference::load(model)?;
    let mut xs = Vec::with_capacity(POOL);
    let mut expected = Vec::with_capacity(POOL);
    for k in 0..POOL {
        let rows = 1 + k % 8;
        let data: Vec<f32> = (0..rows * FEATURES)
            .map(|j| {
                let h = mix((k as u64) << 32 | j as u64);
                // Uniform in [-2, 2), full f32 precision.
                (h >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
            })
            .collect();
        let y = tch::no_grad(|| -> Result<Vec<f32>, String> {
            let t = |e: tch::TchError| e.to_string();
            let x = Tensor::f_from_slice(&data)
                .and_then(|x| x.f_view([rows as i64, FEATURES as i64]))
                .map_err(t)?;
            let y = m.forward(&x)?.f_to_kind(Kind::Float).map_err(t)?;
            Vec::<f32>::try_from(y.f_reshape([-1]).map_err(t)?).map_err(t)
        })
        .map_err(|e| format!("the reference forward failed: {e}"))?;
        xs.push((vec![rows, FEATURES], data));
        expected.push(y);
    }
    Ok((FEATURES, xs, expected))
}

/// Request `i` of a run: 90 % valid (a 10 s deadline), 5 % with a tight
/// deadline (0 or 1 ms), 5 % malformed; every one valid with `valid_only`
/// (a server that honours no deadline and answers malformed requests its
/// own way: MLServer).
pub fn request(i: usize, pool: &Pool, protocol: Protocol, valid_only: bool) -> Req {
    let e = pool.encoded(protocol);
    let h = mix(0x5eed ^ (i as u64).wrapping_mul(0x1_0000_0001));
    let p = (h >> 8) as usize % e.bodies.len();
    let roll = if valid_only { 99 } else { h % 100 };
    let (class, deadline_ms, (body, header_len)) = match roll {
        0..=4 => (
            Class::Malformed,
            10_000,
            e.malformed[(h >> 20) as usize % e.malformed.len()].clone(),
        ),
        5..=9 => (Class::Tight, u64::from(h % 100 >= 8), e.bodies[p].clone()),
        _ => (Class::Valid, 10_000, e.bodies[p].clone()),
    };
    Req {
        class,
        pool: if class == Class::Malformed { 0 } else { p },
        deadline_ms,
        body,
        header_len,
    }
}
