//! The model (one float tensor in, one out) as the workers run it: a
//! TorchScript module or a `.pt2` package behind one [`Model`] trait; one
//! request's input built, its forward run in the request's scopes
//! ([`predict_scoped`]) or with plain tch, the deadline checked by hand
//! ([`predict_plain`]: the `--plain` baseline), and its output read back.

use std::time::Instant;

use axum::http::StatusCode;
use tch::{CModule, Kind, TchError, Tensor};
use tch_scope::aoti::Package;
use tch_scope::batch;
use tch_scope::{Context, Inference, ScopeError, Trainable};

use crate::answers::ApiError;
use crate::requests::{Input, Output};

/// A model the workers run: one float tensor in, one out.
pub(crate) trait Model {
    /// Runs the model on `x`; an input it refuses is a 422 (see
    /// [`refused`]), a passed deadline a 504.
    fn forward_one(&self, x: Tensor) -> Result<Tensor, ApiError>;
    /// Each module's training flag (none for a package).
    fn training(&self) -> Result<Vec<bool>, TchError>;
    /// The batched server's forward: every output; an error of the model
    /// itself (a 422, see [`refused`]) under the scope name [`MODEL`].
    fn forward_batch(&self, xs: &[Tensor]) -> Result<Vec<Tensor>, ScopeError>;
}

/// The scope name of the model's own errors in the batched server.
pub(crate) const MODEL: &str = "serve::model";

impl Model for CModule {
    fn forward_one(&self, x: Tensor) -> Result<Tensor, ApiError> {
        self.forward_ts(&[x]).map_err(|e| refused(&e.to_string()))
    }

    fn forward_batch(&self, xs: &[Tensor]) -> Result<Vec<Tensor>, ScopeError> {
        batch::cmodule_forward(self, xs).map_err(|e| ScopeError::new(MODEL, None, e.reason()))
    }

    fn training(&self) -> Result<Vec<bool>, TchError> {
        Ok(self.modes()?.to_vec())
    }
}

impl Model for Package {
    fn forward_one(&self, x: Tensor) -> Result<Tensor, ApiError> {
        match self.run(&[&x]) {
            Ok(mut ys) if ys.len() == 1 => Ok(ys.remove(0)),
            Ok(ys) => Err(ApiError::internal(format!(
                "the package returned {} tensors, not one",
                ys.len()
            ))),
            // Refused at the run's entry: the deadline's 504.
            Err(e) if e.is_ended() => Err(e.into()),
            Err(e) => Err(refused(&e.to_string())),
        }
    }

    fn training(&self) -> Result<Vec<bool>, TchError> {
        Ok(Vec::new())
    }

    fn forward_batch(&self, xs: &[Tensor]) -> Result<Vec<Tensor>, ScopeError> {
        // Refused at the run's entry by the deadline: its own error (504).
        batch::package_forward(self, xs).map_err(|e| {
            if e.is_ended() {
                e
            } else {
                ScopeError::new(MODEL, None, e.to_string())
            }
        })
    }
}

/// The input as a tensor: `parse_input` checked the shape, so a failure
/// here is the server's (500).
pub(crate) fn input_tensor(input: &Input) -> Result<Tensor, ApiError> {
    Tensor::f_from_slice(&input.data)
        .and_then(|x| x.f_view(input.shape.as_slice()))
        .map_err(|e| ApiError::internal(format!("cannot build the input tensor: {e}")))
}

/// The model's output read back. A non-finite value is the server's
/// failure (500): JSON has no NaN or infinity, and a `null` in a 200
/// would look like an answer.
pub(crate) fn read_output(y: &Tensor) -> Result<Output, ApiError> {
    let fail = |e: TchError| ApiError::internal(format!("cannot read the model's output: {e}"));
    let y = y.f_to_kind(Kind::Float).map_err(fail)?;
    let shape = y.size();
    let data = y
        .f_reshape([-1])
        .and_then(Vec::<f32>::try_from)
        .map_err(fail)?;
    if let Some(i) = data.iter().position(|v| !v.is_finite()) {
        return Err(ApiError::internal(format!(
            "the model's output is not finite (data[{i}] = {})",
            data[i]
        )));
    }
    Ok(Output {
        shape,
        data,
        ran: None,
    })
}

/// The model refused the input (422): the last line of libtorch's message
/// (a TorchScript error ends with the `RuntimeError: …` line; a package's
/// says which input and what it expected). Running out of memory is the
/// server's failure (500).
pub(crate) fn refused(text: &str) -> ApiError {
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let lower = text.to_ascii_lowercase();
    if lower.contains("out of memory") || lower.contains("can't allocate memory") {
        return ApiError::internal(format!("the model ran out of memory: {line}"));
    }
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!("the model refused the input: {line}"),
    )
}

/// The model's input from the request, run, and its output read back.
fn forward(model: &impl Model, input: &Input) -> Result<Output, ApiError> {
    let x = input_tensor(input)?;
    let y = model.forward_one(x)?;
    read_output(&y)
}

/// tch-scope: the request's context (inference mode, its deadline) around
/// the model run in its `Inference` handle. `Context::run` ends with the
/// deadline's `ScopeError` if it refused an operator.
pub(crate) fn predict_scoped<M: Model + tch_scope::Servable>(
    served: &Inference<M>,
    ctx: &Context,
    input: &Input,
) -> Result<Output, ApiError> {
    ctx.run(|| served.run(|m| forward(m, input)))?
}

/// Plain tch: `no_grad`, the deadline checked by hand between steps.
pub(crate) fn predict_plain(
    model: &impl Model,
    deadline: Instant,
    input: &Input,
) -> Result<Output, ApiError> {
    let check = |step: &str| match Instant::now().checked_duration_since(deadline) {
        Some(late) => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            format!("deadline passed {late:?} ago {step}"),
        )),
        None => Ok(()),
    };
    tch::no_grad(|| {
        check("before the input")?;
        let x = input_tensor(input)?;
        check("before forward")?;
        let y = model.forward_one(x)?;
        check("after forward")?;
        read_output(&y)
    })
}
