//! [`gradcheck`]: `torch.autograd.gradcheck`, comparing the gradients
//! autograd computes with central differences.

use tch::{Kind, Tensor};

use crate::Scope;

/// Central differences' step, as `torch.autograd.gradcheck`'s `eps`.
const EPS: f64 = 1e-6;
/// `torch.autograd.gradcheck`'s `atol`.
const ATOL: f64 = 1e-5;
/// `torch.autograd.gradcheck`'s `rtol`.
const RTOL: f64 = 1e-3;

/// Why [`gradcheck`] failed: a Jacobian mismatch (with the output index,
/// the input index and the largest difference), a backward that failed
/// (wrong count or shape: libtorch's or the function's message), or
/// inputs it cannot check.
#[derive(Debug, Clone)]
pub struct GradcheckError {
    output: Option<usize>,
    input: Option<usize>,
    max_difference: Option<f64>,
    message: String,
}

impl GradcheckError {
    fn other(message: String) -> Self {
        Self {
            output: None,
            input: None,
            max_difference: None,
            message,
        }
    }

    /// The output whose Jacobian differs (for a mismatch).
    pub fn output(&self) -> Option<usize> {
        self.output
    }

    /// The input whose Jacobian differs (for a mismatch).
    pub fn input(&self) -> Option<usize> {
        self.input
    }

    /// The largest absolute difference between the analytical and the
    /// numerical Jacobian (for a mismatch).
    pub fn max_difference(&self) -> Option<f64> {
        self.max_difference
    }
}

impl std::fmt::Display for GradcheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for GradcheckError {}

fn values(t: &Tensor) -> Result<Vec<f64>, GradcheckError> {
    Vec::<f64>::try_from(t.reshape([-1]).to_kind(Kind::Double))
        .map_err(|e| GradcheckError::other(format!("gradcheck: cannot read a tensor: {e}")))
}

fn differentiable(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Double | Kind::Float | Kind::Half | Kind::BFloat16
    )
}

/// Runs `f` catching a panic as an error.
fn call(
    f: &dyn Fn(&[&Tensor]) -> Vec<Tensor>,
    inputs: &[&Tensor],
    what: &str,
) -> Result<Vec<Tensor>, GradcheckError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(inputs))).map_err(|p| {
        GradcheckError::other(format!(
            "gradcheck: {what} panicked: {}",
            super::panic_message(&*p)
        ))
    })
}

/// `torch.autograd.gradcheck(f, inputs)`: compares the Jacobian of each
/// output with respect to each input that requires grad, as autograd
/// (your `backward`) computes it, with central differences (eps 1e-6),
/// elementwise within `atol + rtol * |numerical|` (atol 1e-5, rtol 1e-3).
/// Inputs that require grad must be `f64` (`Kind::Double`); integer outputs
/// are skipped. A `backward` returning the wrong count or shapes fails the
/// check with its error.
///
/// `f` is called on copies of the inputs, with grad mode on for the
/// analytical Jacobian and off for the numerical one.
///
/// # Errors
/// A [`GradcheckError`] naming the output index, the input index and the
/// largest difference; or why the check could not run.
///
/// ```
/// use tch::{Device, Kind, Tensor};
/// use tch_scope::autograd::gradcheck;
/// let x = Tensor::randn([4], (Kind::Double, Device::Cpu)).set_requires_grad(true);
/// assert!(gradcheck(|i| vec![i[0].sin()], &[&x]).is_ok());
/// ```
pub fn gradcheck(
    f: impl Fn(&[&Tensor]) -> Vec<Tensor>,
    inputs: &[&Tensor],
) -> Result<(), GradcheckError> {
    let f: &dyn Fn(&[&Tensor]) -> Vec<Tensor> = &f;
    let wanted: Vec<usize> = (0..inputs.len())
        .filter(|&i| inputs[i].defined() && inputs[i].requires_grad())
        .collect();
    if wanted.is_empty() {
        return Err(GradcheckError::other(
            "gradcheck expects at least one input tensor to require gradient".into(),
        ));
    }
    for &i in &wanted {
        if inputs[i].kind() != Kind::Double {
            return Err(GradcheckError::other(format!(
                "gradcheck: input {i} is {:?}; inputs that require grad must be Double (f64) for \
                 central differences to be precise",
                inputs[i].kind()
            )));
        }
    }
    // Copies, so that `f` can neither see nor change the caller's tensors.
    let xs: Vec<Tensor> = inputs
        .iter()
        .map(|x| {
            if x.defined() {
                x.detach().copy().set_requires_grad(x.requires_grad())
            } else {
                Tensor::new()
            }
        })
        .collect();
    let refs: Vec<&Tensor> = xs.iter().collect();
    let diff_inputs: Vec<&Tensor> = wanted.iter().map(|&i| &xs[i]).collect();

    // Analytical: one backward per output element (a one-hot gradient).
    let outputs = {
        let Ok(_grad) = crate::EnableGrad.enter();
        call(f, &refs, "f")?
    };
    // analytical[j][k][r][c] = d output j[r] / d input wanted[k][c].
    #[allow(clippy::type_complexity)]
    let mut analytical: Vec<Option<Vec<Vec<Vec<f64>>>>> = Vec::with_capacity(outputs.len());
    for (j, out) in outputs.iter().enumerate() {
        if !out.defined() || !differentiable(out.kind()) {
            analytical.push(None);
            continue;
        }
        let numel = out.numel();
        let mut rows = vec![Vec::with_capacity(numel); wanted.len()];
        for e in 0..numel {
            let grads = if out.requires_grad() {
                let one_hot = out.zeros_like();
                let mut cell = one_hot.reshape([-1]).get(e as i64);
                let _ = cell.fill_(1.0);
                super::ffi::grad(&[out], &[&one_hot], &diff_inputs, true, false).map_err(|err| {
                    GradcheckError::other(format!(
                        "gradcheck: backward failed for output {j}: {err}"
                    ))
                })?
            } else {
                (0..wanted.len()).map(|_| Tensor::new()).collect()
            };
            for (k, g) in grads.iter().enumerate() {
                let x = diff_inputs[k];
                let row = if g.defined() {
                    if g.size() != x.size() {
                        return Err(GradcheckError::other(format!(
                            "gradcheck: the gradient of output {j} for input {} has shape {:?}, \
                             expected {:?}",
                            wanted[k],
                            g.size(),
                            x.size()
                        )));
                    }
                    values(g)?
                } else {
                    vec![0.0; x.numel()]
                };
                rows[k].push(row);
            }
        }
        analytical.push(Some(rows));
    }

    // Numerical: central differences, one input element at a time.
    let Ok(_no_grad) = crate::NoGrad.enter();
    for (k, &i) in wanted.iter().enumerate() {
        let base = xs[i].detach().copy();
        let flat = base.reshape([-1]);
        let orig = values(&flat)?;
        // numerical[j][e] = d output j / d x_i[e], flattened.
        let mut columns: Vec<Vec<Vec<f64>>> = vec![Vec::new(); outputs.len()];
        for (e, &x0) in orig.iter().enumerate() {
            let set = |v: f64| {
                let mut cell = flat.get(e as i64);
                let _ = cell.fill_(v);
            };
            let eval = |v: f64| -> Result<Vec<Tensor>, GradcheckError> {
                set(v);
                let mut args = refs.clone();
                args[i] = &base;
                call(f, &args, "f")
            };
            let plus = eval(x0 + EPS)?;
            let minus = eval(x0 - EPS)?;
            set(x0);
            for (j, col) in columns.iter_mut().enumerate() {
                if analytical.get(j).is_none_or(|a| a.is_none()) {
                    continue;
                }
                let (p, m) = (plus.get(j), minus.get(j));
                let (Some(p), Some(m)) = (p, m) else {
                    return Err(GradcheckError::other(format!(
                        "gradcheck: f returned fewer outputs when evaluated again (no output {j})"
                    )));
                };
                let d = (p.to_kind(Kind::Double) - m.to_kind(Kind::Double)) / (2.0 * EPS);
                col.push(values(&d)?);
            }
        }
        for (j, a) in analytical.iter().enumerate() {
            let Some(rows) = a else { continue };
            let rows = &rows[k];
            let mut worst: Option<(f64, usize, usize, f64, f64)> = None;
            let mut failed = false;
            for (r, row) in rows.iter().enumerate() {
                for (c, &an) in row.iter().enumerate() {
                    let nu = columns[j][c][r];
                    let diff = (an - nu).abs();
                    if diff > ATOL + RTOL * nu.abs() || diff.is_nan() {
                        failed = true;
                    }
                    if worst.is_none_or(|w| diff > w.0 || diff.is_nan()) {
                        worst = Some((diff, r, c, an, nu));
                    }
                }
            }
            if failed {
                let (diff, r, c, an, nu) = worst.unwrap_or_default();
                return Err(GradcheckError {
                    output: Some(j),
                    input: Some(i),
                    max_difference: Some(diff),
                    message: format!(
                        "gradcheck: Jacobian mismatch for output {j} with respect to input {i}: \
                         largest difference {diff:e} at output element {r}, input element {c} \
                         (analytical {an}, numerical {nu}; atol {ATOL:e}, rtol {RTOL:e})"
                    ),
                });
            }
        }
    }
    Ok(())
}
