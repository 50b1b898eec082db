//! An inference request's body: JSON, or a JSON header followed by the
//! inputs' binary data (the binary tensor data extension).

use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tch::Tensor;

use super::OipError;
use super::data::{tensor_from_bytes, tensor_from_json};
use super::types::Datatype;

/// The HTTP header giving the length of the JSON header when binary data
/// follows it in the body, in requests and responses alike.
pub const HEADER_LENGTH: &str = "Inference-Header-Content-Length";

/// One input of a request, decoded: its name, datatype, shape and tensor (on
/// the CPU, of the datatype's kind and the shape given).
#[derive(Debug)]
pub struct InferInput {
    /// The input's name (`input__0`, … for a served model).
    pub name: String,
    /// The datatype the request declared.
    pub datatype: Datatype,
    /// The shape the request declared.
    pub shape: Vec<i64>,
    /// The data, as a CPU tensor of `datatype`'s kind and `shape`.
    pub tensor: Tensor,
}

/// An output the request asked for, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestedOutput {
    /// The output's name (`output__0`, …).
    pub name: String,
    /// Its `parameters.binary_data`: `Some(true)` asks for binary data,
    /// `Some(false)` for JSON, `None` leaves it to the request's
    /// `binary_data_output`.
    pub binary_data: Option<bool>,
}

/// An inference request, decoded: what `POST /v2/models/{name}/infer`
/// carries.
#[derive(Debug)]
pub struct InferRequest {
    /// The request's `id`, echoed in the response.
    pub id: Option<String>,
    /// The inputs, in the order the request gave them.
    pub inputs: Vec<InferInput>,
    /// The outputs asked for, in order; `None` (no `outputs` field) asks for
    /// all of the model's outputs.
    pub outputs: Option<Vec<RequestedOutput>>,
    /// The request's `parameters.binary_data_output`: outputs in binary
    /// unless an output's own `binary_data` says otherwise. Default `false`.
    pub binary_data_output: bool,
    /// The request's `parameters.timeout`, in microseconds as Triton and
    /// `tritonclient` give it: the request's deadline, from its arrival.
    pub timeout: Option<Duration>,
    /// The request's `parameters`, all of them as given (the ones above
    /// included), for a server's own.
    pub parameters: Map<String, Value>,
}

/// The JSON header, as written (the data borrowed, decoded later by
/// datatype).
#[derive(Deserialize)]
struct RawRequest<'a> {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    #[serde(borrow)]
    inputs: Vec<RawInput<'a>>,
    #[serde(default)]
    outputs: Option<Vec<RawOutput>>,
}

#[derive(Deserialize)]
struct RawInput<'a> {
    name: String,
    shape: Vec<i64>,
    datatype: String,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawOutput {
    name: String,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
}

/// Parses the value of the `Inference-Header-Content-Length` header.
///
/// # Errors
///
/// A 400 when it is not a non-negative decimal integer.
pub fn parse_header_length(value: &[u8]) -> Result<usize, OipError> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .ok_or_else(|| {
            OipError::bad_request(format!(
                "{HEADER_LENGTH} must be a non-negative integer, not {:?}",
                String::from_utf8_lossy(value)
            ))
        })
}

impl InferRequest {
    /// Decodes a request body. `header_length` is the value of the
    /// `Inference-Header-Content-Length` header ([`parse_header_length`]):
    /// with it, the body's first `header_length` bytes are the JSON header
    /// and the rest the binary data of the inputs that give
    /// `parameters.binary_data_size`, in the order of `inputs`; without it,
    /// the whole body is JSON.
    ///
    /// # Errors
    ///
    /// A 400 naming what is wrong: a header length past the body, JSON that
    /// is invalid (or not UTF-8) or misses a field, an unsupported datatype
    /// or parameter, an input with both or neither of `data` and
    /// `binary_data_size`, data whose count or byte size does not fit its
    /// shape, binary data that ends early or runs past the last input, a
    /// name given twice.
    pub fn parse(body: &[u8], header_length: Option<usize>) -> Result<Self, OipError> {
        let (header, mut binary) = match header_length {
            Some(n) if n > body.len() => {
                return Err(OipError::bad_request(format!(
                    "{HEADER_LENGTH} is {n}, past the body's {} bytes",
                    body.len()
                )));
            }
            Some(n) => body.split_at(n),
            None => (body, &[][..]),
        };
        let raw: RawRequest<'_> = serde_json::from_slice(header)
            .map_err(|e| OipError::bad_request(format!("the request's JSON is invalid: {e}")))?;
        let parameters = raw.parameters.unwrap_or_default();
        let binary_data_output =
            flag(&parameters, "binary_data_output", "the request")?.unwrap_or(false);
        let timeout = timeout(&parameters)?;
        refuse_sequence(&parameters)?;

        let mut inputs = Vec::with_capacity(raw.inputs.len());
        for (i, input) in raw.inputs.into_iter().enumerate() {
            let what = format!("input {:?}", input.name);
            if raw_names(&inputs).any(|n| n == input.name) {
                return Err(OipError::bad_request(format!("{what} is given twice")));
            }
            let datatype: Datatype = input
                .datatype
                .parse()
                .map_err(|e: OipError| e.context(&what))?;
            let params = input.parameters.unwrap_or_default();
            refuse_shared_memory(&params, &what)?;
            let size = match params.get("binary_data_size") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
                    OipError::bad_request(format!(
                        "{what}: parameters.binary_data_size must be a non-negative integer, not {v}"
                    ))
                })?),
            };
            let tensor = match (input.data, size) {
                (Some(_), Some(_)) => {
                    return Err(OipError::bad_request(format!(
                        "{what} gives both data and parameters.binary_data_size"
                    )));
                }
                (None, None) => {
                    return Err(OipError::bad_request(format!(
                        "{what} gives neither data nor parameters.binary_data_size"
                    )));
                }
                (Some(data), None) => tensor_from_json(data, &input.shape, datatype, &what)?,
                (None, Some(n)) => {
                    if n > binary.len() {
                        return Err(OipError::bad_request(format!(
                            "{what} (input {i}) has binary_data_size {n}, but only {} bytes of binary \
                             data are left in the body{}",
                            binary.len(),
                            if header_length.is_none() {
                                format!(
                                    " (no {HEADER_LENGTH} header: the whole body was read as JSON)"
                                )
                            } else {
                                String::new()
                            }
                        )));
                    }
                    let (bytes, rest) = binary.split_at(n);
                    binary = rest;
                    tensor_from_bytes(bytes, &input.shape, datatype, &what)?
                }
            };
            inputs.push(InferInput {
                name: input.name,
                datatype,
                shape: input.shape,
                tensor,
            });
        }
        if !binary.is_empty() {
            return Err(OipError::bad_request(format!(
                "the body holds {} bytes past the inputs' binary data",
                binary.len()
            )));
        }
        let outputs = raw.outputs.map(requested_outputs).transpose()?;
        Ok(Self {
            id: raw.id,
            inputs,
            outputs,
            binary_data_output,
            timeout,
            parameters,
        })
    }

    /// Whether the output `name` is to be sent in binary: its own
    /// `binary_data` if the request gave one, else `binary_data_output`.
    #[must_use]
    pub fn binary_output(&self, name: &str) -> bool {
        self.outputs
            .iter()
            .flatten()
            .find(|o| o.name == name)
            .and_then(|o| o.binary_data)
            .unwrap_or(self.binary_data_output)
    }

    /// The input named `name`, if the request has it.
    #[must_use]
    pub fn input(&self, name: &str) -> Option<&InferInput> {
        self.inputs.iter().find(|i| i.name == name)
    }
}

fn raw_names(inputs: &[InferInput]) -> impl Iterator<Item = &str> {
    inputs.iter().map(|i| i.name.as_str())
}

fn requested_outputs(raw: Vec<RawOutput>) -> Result<Vec<RequestedOutput>, OipError> {
    let mut out: Vec<RequestedOutput> = Vec::with_capacity(raw.len());
    for o in raw {
        let what = format!("output {:?}", o.name);
        if out.iter().any(|p| p.name == o.name) {
            return Err(OipError::bad_request(format!("{what} is asked for twice")));
        }
        let params = o.parameters.unwrap_or_default();
        refuse_shared_memory(&params, &what)?;
        match params.get("classification") {
            None | Some(Value::Null) => {}
            Some(v) if v.as_u64() == Some(0) => {}
            Some(_) => {
                return Err(OipError::bad_request(format!(
                    "{what}: the classification extension is not supported"
                )));
            }
        }
        out.push(RequestedOutput {
            binary_data: flag(&params, "binary_data", &what)?,
            name: o.name,
        });
    }
    Ok(out)
}

/// A boolean parameter: absent (or null) is `None`, a non-boolean a 400.
fn flag(params: &Map<String, Value>, key: &str, what: &str) -> Result<Option<bool>, OipError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(OipError::bad_request(format!(
            "{what}: parameters.{key} must be true or false, not {v}"
        ))),
    }
}

/// `parameters.timeout`: a non-negative integer of microseconds.
fn timeout(params: &Map<String, Value>) -> Result<Option<Duration>, OipError> {
    match params.get("timeout") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|us| Some(Duration::from_micros(us)))
            .ok_or_else(|| {
                OipError::bad_request(format!(
                    "parameters.timeout must be a non-negative integer of microseconds, not {v}"
                ))
            }),
    }
}

/// A request of a sequence (stateful models) is refused: every request is
/// served on its own.
fn refuse_sequence(params: &Map<String, Value>) -> Result<(), OipError> {
    match params.get("sequence_id") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Number(n)) if n.as_u64() == Some(0) => Ok(()),
        Some(Value::String(s)) if s.is_empty() => Ok(()),
        Some(v) => Err(OipError::bad_request(format!(
            "parameters.sequence_id is {v}: sequences (stateful models) are not supported"
        ))),
    }
}

fn refuse_shared_memory(params: &Map<String, Value>, what: &str) -> Result<(), OipError> {
    if params.contains_key("shared_memory_region") {
        return Err(OipError::bad_request(format!(
            "{what}: the shared-memory extension is not supported; send the data in the body"
        )));
    }
    Ok(())
}
