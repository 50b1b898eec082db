//! The Open Inference Protocol (KServe v2, as Triton, KServe, MLServer and
//! `tritonclient` speak it): request bodies into tensors, tensors into
//! response bodies, model metadata and error bodies, with no HTTP framework.
//!
//! A server's `POST /v2/models/{name}/infer`:
//!
//! 1. [`ModelMetadata::check_model`] (404 for another name);
//! 2. [`InferRequest::parse`] the body, with the
//!    `Inference-Header-Content-Length` header ([`HEADER_LENGTH`],
//!    [`parse_header_length`]) when the request has it;
//! 3. [`ModelMetadata::take_inputs`]: the inputs checked against the model
//!    (count, names, datatypes, shapes with `-1` for any size) and put in its
//!    order;
//! 4. the forward, within [`InferRequest::timeout`] if given;
//! 5. [`encode_response`]: the body, its content type and the header length
//!    to send back.
//!
//! Any step's [`OipError`] becomes the response: its [`status`](OipError::status)
//! and its [`body`](OipError::body), `{"error": "…"}`.
//!
//! Both encodings go both ways: tensor data as JSON arrays (flat or nested
//! in requests, flat in responses) and the binary tensor data extension
//! (raw little-endian bytes after the JSON header, each tensor's length in
//! its `parameters.binary_data_size`; asked for by an output's
//! `binary_data` or the request's `binary_data_output`). [`Datatype`] lists
//! the datatypes carried and those refused. Inputs and outputs are named as
//! Triton's PyTorch backend names them: [`input_name`], [`output_name`].

mod data;
mod error;
mod metadata;
mod request;
mod response;
mod types;

#[cfg(test)]
mod tests;

pub use error::{ErrorKind, OipError};
pub use metadata::{ModelMetadata, PLATFORM_TORCHSCRIPT, TensorMetadata};
pub use request::{HEADER_LENGTH, InferInput, InferRequest, RequestedOutput, parse_header_length};
pub use response::{EncodedResponse, OutputTensor, encode_outputs, encode_response};
pub use types::Datatype;

const INPUT_PREFIX: &str = "input__";
const OUTPUT_PREFIX: &str = "output__";

/// The name of a model's `index`th input: `input__0`, `input__1`, ….
#[must_use]
pub fn input_name(index: usize) -> String {
    format!("{INPUT_PREFIX}{index}")
}

/// The name of a model's `index`th output: `output__0`, `output__1`, ….
#[must_use]
pub fn output_name(index: usize) -> String {
    format!("{OUTPUT_PREFIX}{index}")
}

/// The index of an input named as [`input_name`] names it (`input__3` → 3);
/// `None` for any other name.
#[must_use]
pub fn input_index(name: &str) -> Option<usize> {
    index_of(name, INPUT_PREFIX)
}

/// The index of an output named as [`output_name`] names it; `None` for any
/// other name.
#[must_use]
pub fn output_index(name: &str) -> Option<usize> {
    index_of(name, OUTPUT_PREFIX)
}

fn index_of(name: &str, prefix: &str) -> Option<usize> {
    let digits = name.strip_prefix(prefix)?;
    // One spelling per index: no sign, no leading zero.
    let canonical =
        digits == "0" || (!digits.starts_with('0') && digits.bytes().all(|b| b.is_ascii_digit()));
    if canonical { digits.parse().ok() } else { None }
}
