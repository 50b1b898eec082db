//! An inference response's body: JSON, or a JSON header followed by the
//! outputs' binary data.

use serde::Serialize;
use serde_json::{Map, Value};
use tch::Tensor;

use super::OipError;
use super::data::{JsonData, append_bytes, tensor_to_json};
use super::metadata::ModelMetadata;
use super::request::InferRequest;
use super::types::Datatype;

/// An encoded response body, with what the server puts in its headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedResponse {
    /// The body: the JSON header, then the binary outputs' bytes in the
    /// order of the header's `outputs`.
    pub body: Vec<u8>,
    /// The JSON header's length when binary data follows it: the value of
    /// the `Inference-Header-Content-Length` response header
    /// ([`HEADER_LENGTH`](super::HEADER_LENGTH)). `None` when the body is
    /// JSON alone (no header to send).
    pub header_length: Option<usize>,
}

impl EncodedResponse {
    /// The body's content type: `application/json` for JSON alone,
    /// `application/octet-stream` with binary data.
    #[must_use]
    pub const fn content_type(&self) -> &'static str {
        if self.header_length.is_some() {
            "application/octet-stream"
        } else {
            "application/json"
        }
    }
}

/// One output to encode: its name, its tensor (any device; read on the
/// CPU) and whether it goes in binary.
#[derive(Debug, Clone, Copy)]
pub struct OutputTensor<'a> {
    /// The output's name.
    pub name: &'a str,
    /// Its tensor; the datatype follows from its kind.
    pub tensor: &'a Tensor,
    /// Binary (`true`) or JSON (`false`).
    pub binary: bool,
}

#[derive(Serialize)]
struct Header<'a> {
    model_name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    outputs: Vec<OutputHeader<'a>>,
}

#[derive(Serialize)]
struct OutputHeader<'a> {
    name: &'a str,
    datatype: Datatype,
    shape: Vec<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<JsonData>,
}

/// Encodes `outputs` in order as the response of model `model_name`
/// (`model_version`, and the request's `id` echoed, where given): each
/// output's datatype from its tensor's kind, its shape from the tensor's,
/// its data as a flat JSON array or as `parameters.binary_data_size` bytes
/// after the JSON header.
///
/// # Errors
///
/// A 500 for a tensor of a kind the protocol cannot carry here (see
/// [`Datatype::from_kind`]) or one that cannot be read; a 400 for a NaN or
/// infinity asked for in JSON, which has no token for them.
pub fn encode_outputs(
    model_name: &str,
    model_version: Option<&str>,
    id: Option<&str>,
    outputs: &[OutputTensor<'_>],
) -> Result<EncodedResponse, OipError> {
    let mut binary = Vec::new();
    let mut headers = Vec::with_capacity(outputs.len());
    for out in outputs {
        let what = format!("output {:?}", out.name);
        let (kind, shape) = out
            .tensor
            .f_kind()
            // A defined tensor (its kind read) has a size.
            .map(|k| (k, out.tensor.size()))
            .map_err(|e| OipError::internal(format!("{what}: cannot read the tensor: {e}")))?;
        let datatype = Datatype::from_kind(kind).map_err(|e| e.context(&what))?;
        let (parameters, data) = if out.binary {
            let n = append_bytes(out.tensor, datatype, &mut binary)?;
            let mut p = Map::new();
            p.insert("binary_data_size".to_owned(), Value::from(n));
            (Some(p), None)
        } else {
            (None, Some(tensor_to_json(out.tensor, datatype, out.name)?))
        };
        headers.push(OutputHeader {
            name: out.name,
            datatype,
            shape,
            parameters,
            data,
        });
    }
    let header = Header {
        model_name,
        model_version,
        id,
        outputs: headers,
    };
    let mut body = serde_json::to_vec(&header)
        .map_err(|e| OipError::internal(format!("cannot write the response: {e}")))?;
    let header_length =
        (!binary.is_empty() || outputs.iter().any(|o| o.binary)).then_some(body.len());
    body.extend_from_slice(&binary);
    Ok(EncodedResponse {
        body,
        header_length,
    })
}

/// Encodes the response of `model` to `request`: `outputs` are all of the
/// model's outputs in its order (`output__0` first, as the forward returned
/// them); the ones the request asked for (all when it named none) are sent,
/// in its order, each in binary or JSON as [`InferRequest::binary_output`]
/// says. The model's first version is the response's `model_version`.
///
/// # Errors
///
/// A 500 when `outputs` is not one tensor per output of `model`; a 400 for
/// an output the request names that the model lacks (caught earlier by
/// [`ModelMetadata::validate`]); the errors of [`encode_outputs`].
pub fn encode_response(
    model: &ModelMetadata,
    request: &InferRequest,
    outputs: &[Tensor],
) -> Result<EncodedResponse, OipError> {
    if outputs.len() != model.outputs.len() {
        return Err(OipError::internal(format!(
            "model {:?} answered {} output(s), its metadata declares {}",
            model.name,
            outputs.len(),
            model.outputs.len()
        )));
    }
    let pick = |name: &str| -> Result<&Tensor, OipError> {
        model
            .outputs
            .iter()
            .position(|m| m.name == name)
            .map(|i| &outputs[i])
            .ok_or_else(|| {
                OipError::bad_request(format!("unknown output {name:?} of model {:?}", model.name))
            })
    };
    let selected: Vec<OutputTensor<'_>> = match &request.outputs {
        Some(asked) => asked
            .iter()
            .map(|o| {
                Ok(OutputTensor {
                    name: &o.name,
                    tensor: pick(&o.name)?,
                    binary: request.binary_output(&o.name),
                })
            })
            .collect::<Result<_, OipError>>()?,
        None => model
            .outputs
            .iter()
            .zip(outputs)
            .map(|(m, tensor)| OutputTensor {
                name: &m.name,
                tensor,
                binary: request.binary_data_output,
            })
            .collect(),
    };
    encode_outputs(
        &model.name,
        model.versions.first().map(String::as_str),
        request.id.as_deref(),
        &selected,
    )
}
