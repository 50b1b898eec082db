//! The `--debug` headers of `/predict`: `x-debug-fault` and `x-debug-grad`
//! on a request, and the batched server's answer headers that say what the
//! forward ran in ([`Ran`]).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};
use tch::{TchError, Tensor};
use tch_scope::{is_grad_enabled, is_inference_mode_enabled};

use crate::answers::ApiError;
use crate::flags::MAX_BUDGET_MS;

/// What `x-debug-fault` makes the worker do with a job (`--debug` only).
#[derive(Debug, Clone)]
pub(crate) enum Fault {
    /// Panics inside the job (caught: the worker goes on).
    Panic(String),
    /// Sleeps before the model runs (a worker busy that long).
    Sleep(Duration),
    /// Panics outside the job's catch: the worker thread ends.
    Die,
}

pub(crate) fn debug_fault(headers: &HeaderMap) -> Result<Option<Fault>, ApiError> {
    let Some(v) = headers.get("x-debug-fault") else {
        return Ok(None);
    };
    let v = v.to_str().unwrap_or("");
    let fault = if let Some(m) = v.strip_prefix("panic:") {
        Some(Fault::Panic(m.to_string()))
    } else if let Some(ms) = v.strip_prefix("sleep:") {
        ms.trim()
            .parse::<u64>()
            .ok()
            .map(|ms| Fault::Sleep(Duration::from_millis(ms.min(MAX_BUDGET_MS))))
    } else if v == "die" {
        Some(Fault::Die)
    } else {
        None
    };
    fault.map(Some).ok_or_else(|| {
        ApiError::bad_request("x-debug-fault must be panic:MESSAGE, sleep:MS or die")
    })
}

/// `x-debug-grad` (`--debug` only): `on` captures the request's context
/// with grad mode on and inference mode off (`inference_mode(false),
/// enable_grad`) instead of the handler's `inference_mode`, so that it is
/// never batched with the default requests (the batched server also makes
/// its input require grad: a request that asks for a graph, computed with
/// grad mode, alone); `off` (or no header) is the default.
pub(crate) fn debug_grad(headers: &HeaderMap) -> Result<bool, ApiError> {
    match headers.get("x-debug-grad").map(HeaderValue::to_str) {
        None => Ok(false),
        Some(Ok("on")) => Ok(true),
        Some(Ok("off")) => Ok(false),
        Some(_) => Err(ApiError::bad_request("x-debug-grad must be on or off")),
    }
}

/// What a request's forward in the batched server ran in (`--debug`
/// only), read on the worker inside the forward, so inside the batch's
/// context: the forward's number (one per model forward, a batch of
/// requests or one alone, never reused) and the grad and inference modes.
/// The forward returns it as one more output, `int64` `[rows, 3]` (each
/// row `[forward, grad_mode, inference_mode]`), which the batcher splits
/// back by rows like the model's output; the handler takes it off and
/// answers it as headers (`x-debug-batch`, `x-debug-grad-mode`,
/// `x-debug-inference-mode`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ran {
    batch: i64,
    grad_mode: bool,
    inference_mode: bool,
}

impl Ran {
    /// This thread's modes now, under a new forward number.
    pub(crate) fn here(forwards: &AtomicI64) -> Ran {
        Ran {
            batch: forwards.fetch_add(1, Ordering::Relaxed),
            grad_mode: is_grad_enabled(),
            inference_mode: is_inference_mode_enabled(),
        }
    }

    /// The output that carries it: `rows` equal rows.
    pub(crate) fn output(self, rows: i64) -> Result<Tensor, TchError> {
        let row = [
            self.batch,
            i64::from(self.grad_mode),
            i64::from(self.inference_mode),
        ];
        Tensor::f_from_slice(&row)?
            .f_view([1, 3])?
            .f_expand([rows, 3], false)
    }

    /// A request's part of that output (its first row).
    pub(crate) fn read(t: &Tensor) -> Result<Ran, TchError> {
        let at = |k: i64| t.f_int64_value(&[0, k]);
        Ok(Ran {
            batch: at(0)?,
            grad_mode: at(1)? != 0,
            inference_mode: at(2)? != 0,
        })
    }

    /// Its answer headers.
    pub(crate) fn headers(self, h: &mut HeaderMap) {
        h.insert("x-debug-batch", HeaderValue::from(self.batch));
        let flag = |b: bool| HeaderValue::from_static(if b { "true" } else { "false" });
        h.insert("x-debug-grad-mode", flag(self.grad_mode));
        h.insert("x-debug-inference-mode", flag(self.inference_mode));
    }
}
