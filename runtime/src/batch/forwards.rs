//! Ready-made forwards for the models the serving handle accepts.

use tch::Tensor;

use crate::ScopeError;

/// A forward for a TorchScript model: [`tch::CModule::forward_is`] on the
/// inputs, its output a tensor or a tuple or list of tensors.
///
/// # Errors
/// The model's error, or an output that is not tensors, as a [`ScopeError`]
/// of [`Stage::Run`](crate::Stage::Run): "cannot run `CModule::forward`: …".
pub fn cmodule_forward(m: &tch::CModule, inputs: &[Tensor]) -> Result<Vec<Tensor>, ScopeError> {
    use tch::IValue;
    let error = |reason: String| ScopeError::run("CModule::forward", None, reason);
    let args: Vec<IValue> = inputs
        .iter()
        .map(|x| IValue::Tensor(x.shallow_clone()))
        .collect();
    let tensor = |v: IValue| match v {
        IValue::Tensor(t) => Ok(t),
        other => Err(error(format!("an output is not a tensor: {other:?}"))),
    };
    match m.forward_is(&args).map_err(|e| error(e.to_string()))? {
        IValue::Tensor(t) => Ok(vec![t]),
        IValue::TensorList(ts) => Ok(ts),
        IValue::Tuple(vs) | IValue::GenericList(vs) => vs.into_iter().map(tensor).collect(),
        other => Err(error(format!("the output is not tensors: {other:?}"))),
    }
}

/// A forward for an AOTInductor package: [`Package::run`](crate::aoti::Package::run).
///
/// # Errors
/// The package's [`ScopeError`].
pub fn package_forward(
    p: &crate::aoti::Package,
    inputs: &[Tensor],
) -> Result<Vec<Tensor>, ScopeError> {
    let inputs: Vec<&Tensor> = inputs.iter().collect();
    p.run(&inputs)
}
