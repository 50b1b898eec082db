//! A model's metadata (`GET /v2/models/{name}`) and the checks of a request
//! against it.

use serde::Serialize;
use tch::Tensor;

use super::request::InferRequest;
use super::types::Datatype;
use super::{OipError, input_name, output_name};

/// Triton's platform name for a TorchScript model (its PyTorch backend).
pub const PLATFORM_TORCHSCRIPT: &str = "pytorch_libtorch";

/// One input or output of a model: its name, datatype and shape, `-1` for a
/// dimension of any size (the batch, typically).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TensorMetadata {
    /// The tensor's name (`input__0`, `output__0`, …).
    pub name: String,
    /// Its datatype.
    pub datatype: Datatype,
    /// Its shape; `-1` is a dynamic dimension.
    pub shape: Vec<i64>,
}

/// A model's metadata, as `GET /v2/models/{name}` answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelMetadata {
    /// The model's name, as it appears in the routes.
    pub name: String,
    /// The versions served (`["1"]` by [`ModelMetadata::new`]).
    pub versions: Vec<String>,
    /// The framework, e.g. [`PLATFORM_TORCHSCRIPT`].
    pub platform: String,
    /// The inputs, in the order the model takes them.
    pub inputs: Vec<TensorMetadata>,
    /// The outputs, in the order the model returns them.
    pub outputs: Vec<TensorMetadata>,
}

impl ModelMetadata {
    /// The metadata of model `name` on `platform`, version `"1"`, whose
    /// inputs and outputs are given as (datatype, shape) in order and named
    /// `input__0`, `input__1`, … and `output__0`, … (Triton's PyTorch-backend
    /// convention).
    #[must_use]
    pub fn new(
        name: impl Into<String>,
        platform: impl Into<String>,
        inputs: impl IntoIterator<Item = (Datatype, Vec<i64>)>,
        outputs: impl IntoIterator<Item = (Datatype, Vec<i64>)>,
    ) -> Self {
        let named = |name: fn(usize) -> String, v: (usize, (Datatype, Vec<i64>))| TensorMetadata {
            name: name(v.0),
            datatype: v.1.0,
            shape: v.1.1,
        };
        Self {
            name: name.into(),
            versions: vec!["1".to_owned()],
            platform: platform.into(),
            inputs: inputs
                .into_iter()
                .enumerate()
                .map(|v| named(input_name, v))
                .collect(),
            outputs: outputs
                .into_iter()
                .enumerate()
                .map(|v| named(output_name, v))
                .collect(),
        }
    }

    /// The metadata response body (JSON).
    #[must_use]
    pub fn to_json(&self) -> Vec<u8> {
        // Strings, integers and datatype names: cannot fail to serialize.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// `Ok` when `name` (and `version`, if the route gave one) is this
    /// model's; a 404 ([`OipError::unknown_model`]) otherwise.
    ///
    /// # Errors
    ///
    /// The 404 above.
    pub fn check_model(&self, name: &str, version: Option<&str>) -> Result<(), OipError> {
        if name != self.name {
            return Err(OipError::unknown_model(name));
        }
        match version {
            Some(v) if !self.versions.iter().any(|s| s == v) => Err(OipError::new(
                super::ErrorKind::NotFound,
                format!(
                    "model {name:?} has no version {v:?} (versions: {:?})",
                    self.versions
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Checks `request` against the model: as many inputs as the model
    /// takes, each named as one of them, of its datatype and a shape of its
    /// rank whose dimensions equal the fixed ones (`-1` takes any size); and
    /// every output asked for is one of the model's.
    ///
    /// # Errors
    ///
    /// A 400 naming the input or output and what differs.
    pub fn validate(&self, request: &InferRequest) -> Result<(), OipError> {
        let names = |ts: &[TensorMetadata]| {
            ts.iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if request.inputs.len() != self.inputs.len() {
            return Err(OipError::bad_request(format!(
                "model {:?} takes {} input(s) ({}), the request gives {}",
                self.name,
                self.inputs.len(),
                names(&self.inputs),
                request.inputs.len()
            )));
        }
        for input in &request.inputs {
            let Some(meta) = self.inputs.iter().find(|m| m.name == input.name) else {
                return Err(OipError::bad_request(format!(
                    "unknown input {:?}: model {:?} takes {}",
                    input.name,
                    self.name,
                    names(&self.inputs)
                )));
            };
            if input.datatype != meta.datatype {
                return Err(OipError::bad_request(format!(
                    "input {:?} is {}, the request gives {}",
                    meta.name, meta.datatype, input.datatype
                )));
            }
            let fits = input.shape.len() == meta.shape.len()
                && input
                    .shape
                    .iter()
                    .zip(&meta.shape)
                    .all(|(&d, &m)| m < 0 || d == m);
            if !fits {
                return Err(OipError::bad_request(format!(
                    "input {:?} has shape {:?} (-1: any size), the request gives {:?}",
                    meta.name, meta.shape, input.shape
                )));
            }
        }
        for output in request.outputs.iter().flatten() {
            if !self.outputs.iter().any(|m| m.name == output.name) {
                return Err(OipError::bad_request(format!(
                    "unknown output {:?}: model {:?} returns {}",
                    output.name,
                    self.name,
                    names(&self.outputs)
                )));
            }
        }
        Ok(())
    }

    /// [`validate`](Self::validate)s `request` and returns its input tensors
    /// in the model's order (`input__0` first), whatever order the request
    /// gave them in.
    ///
    /// # Errors
    ///
    /// The 400s of [`validate`](Self::validate).
    pub fn take_inputs(&self, request: &mut InferRequest) -> Result<Vec<Tensor>, OipError> {
        self.validate(request)?;
        let mut inputs = std::mem::take(&mut request.inputs);
        let mut ordered = Vec::with_capacity(inputs.len());
        for meta in &self.inputs {
            // validate() found every name: each is there once.
            let i = inputs
                .iter()
                .position(|i| i.name == meta.name)
                .ok_or_else(|| {
                    OipError::bad_request(format!("the request has no input {:?}", meta.name))
                })?;
            ordered.push(inputs.swap_remove(i).tensor);
        }
        Ok(ordered)
    }
}
