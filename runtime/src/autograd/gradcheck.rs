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

/// A copy of `x` with its sizes and strides (so `f` sees the layout the
/// caller gave), in storage of its own. Dimensions of stride 0 (an
/// expanded tensor) stay expanded: one slice is copied and expanded again.
fn same_layout_copy(x: &Tensor) -> Result<Tensor, GradcheckError> {
    let fail =
        |e: tch::TchError| GradcheckError::other(format!("gradcheck: cannot copy an input: {e}"));
    let size = x.size();
    let mut core = x.detach();
    let mut expanded = false;
    for (d, (&n, &st)) in size.iter().zip(&x.stride()).enumerate() {
        if st == 0 && n > 1 {
            core = core.narrow(d as i64, 0, 1);
            expanded = true;
        }
    }
    let copy = Tensor::f_empty_strided(core.size(), core.stride(), (x.kind(), x.device()))
        .map_err(fail)?;
    let mut dst = copy.shallow_clone();
    dst.f_copy_(&core).map_err(fail)?;
    Ok(if expanded {
        copy.expand(&size, false)
    } else {
        copy
    })
}

/// The element of `t` at flat index `e` in row-major (logical) order, as a
/// 0-dim view sharing `t`'s storage whatever its strides.
fn element(t: &Tensor, size: &[i64], mut e: i64) -> Tensor {
    let mut index = vec![0; size.len()];
    for (slot, &n) in index.iter_mut().zip(size).rev() {
        *slot = e % n;
        e /= n;
    }
    index.iter().fold(t.shallow_clone(), |v, &i| v.select(0, i))
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
/// analytical Jacobian and off for the numerical one. The copies have the
/// inputs' sizes and strides, so `f` sees a transposed or sliced input as
/// it was given, and each element is perturbed in the memory `f` reads;
/// outputs of any layout (transposed, sliced, expanded) are compared
/// element by element in their logical order. An input that requires grad
/// and has a dimension of stride 0 (an expanded tensor, whose elements
/// share memory) is refused, as PyTorch refuses it: pass its
/// `.contiguous()`. The verdicts are PyTorch's on the same function and
/// inputs.
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
        let x = inputs[i];
        if x.size()
            .iter()
            .zip(&x.stride())
            .any(|(&n, &st)| st == 0 && n > 1)
        {
            return Err(GradcheckError::other(format!(
                "gradcheck: input {i} has a dimension with stride 0 (an expanded tensor, sizes \
                 {:?}, strides {:?}): its elements share memory, so one cannot be perturbed \
                 alone; pass its `.contiguous()`",
                x.size(),
                x.stride()
            )));
        }
    }
    // Copies, so that `f` can neither see nor change the caller's tensors.
    let xs: Vec<Tensor> = inputs
        .iter()
        .map(|x| {
            if x.defined() {
                Ok(same_layout_copy(x)?.set_requires_grad(x.requires_grad()))
            } else {
                Ok(Tensor::new())
            }
        })
        .collect::<Result<_, GradcheckError>>()?;
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
                // Contiguous whatever the output's layout: element `e` of
                // the flat view is element `e` of the output.
                let flat = Tensor::zeros([numel as i64], (out.kind(), out.device()));
                let _ = flat.get(e as i64).fill_(1.0);
                let one_hot = flat.view(out.size().as_slice());
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

    // Numerical: central differences, one input element at a time,
    // perturbed in place in the memory `f` reads (as PyTorch perturbs
    // `input.data`).
    let Ok(_no_grad) = crate::NoGrad.enter();
    for (k, &i) in wanted.iter().enumerate() {
        let alias = xs[i].detach();
        let size = alias.size();
        let orig = values(&alias)?;
        // numerical[j][e] = d output j / d x_i[e], flattened.
        let mut columns: Vec<Vec<Vec<f64>>> = vec![Vec::new(); outputs.len()];
        for (e, &x0) in orig.iter().enumerate() {
            let mut cell = element(&alias, &size, e as i64);
            // Each output read at once: an output that is a view of the
            // input would change with the next perturbation.
            let mut eval = |v: f64| -> Result<Vec<Option<Vec<f64>>>, GradcheckError> {
                let _ = cell.fill_(v);
                let outs = call(f, &refs, "f")?;
                (0..outputs.len())
                    .map(|j| {
                        if analytical[j].is_none() {
                            return Ok(None);
                        }
                        let Some(o) = outs.get(j) else {
                            return Err(GradcheckError::other(format!(
                                "gradcheck: f returned fewer outputs when evaluated again (no \
                                 output {j})"
                            )));
                        };
                        if o.size() != outputs[j].size() {
                            return Err(GradcheckError::other(format!(
                                "gradcheck: output {j} has shape {:?} when evaluated again, {:?} \
                                 the first time",
                                o.size(),
                                outputs[j].size()
                            )));
                        }
                        values(o).map(Some)
                    })
                    .collect()
            };
            let plus = eval(x0 + EPS);
            let minus = eval(x0 - EPS);
            let _ = cell.fill_(x0);
            let (plus, minus) = (plus?, minus?);
            for (col, (p, m)) in columns.iter_mut().zip(plus.iter().zip(&minus)) {
                if let (Some(p), Some(m)) = (p, m) {
                    col.push(
                        p.iter()
                            .zip(m)
                            .map(|(p, m)| (p - m) / (2.0 * EPS))
                            .collect(),
                    );
                }
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
