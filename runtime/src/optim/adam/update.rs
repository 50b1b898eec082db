//! One parameter's Adam (or AdamW) update, as PyTorch computes it.

use tch::Tensor;

use super::{Next, Options, Slot};
use crate::optim::cow::{Cow, dst};
use crate::optim::params::scalar;

/// PyTorch's `_single_tensor_adam` for one parameter (not capturable, not
/// differentiable, not maximize), the same operators in the same order.
/// Each tensor a boundary holds is written out of place, into a storage of
/// its pool, with the `out=` form of the same operator (the same kernel:
/// bitwise the in-place result); the caller makes the outputs current.
pub(super) fn update(
    decoupled: bool,
    o: &Options,
    p: &Tensor,
    p_cow: &mut Cow,
    grad: &Tensor,
    s: &mut Slot,
) -> Result<Next, tch::TchError> {
    let p_out = p_cow.target(p)?;
    let p_dst = dst(&p_out, p);
    // What the next operator reads of the parameter.
    let mut param = p.shallow_clone();
    let mut grad = grad.shallow_clone();
    if o.weight_decay != 0.0 {
        if decoupled {
            // param.mul_(1 - lr * weight_decay)
            let _ = param.f_mul_out(p_dst, &scalar(1.0 - o.lr * o.weight_decay)?)?;
            param = p_dst.shallow_clone();
        } else {
            // grad.add(param, alpha=weight_decay)
            grad = grad.f_add(&param.f_mul(&scalar(o.weight_decay)?)?)?;
        }
    }
    // exp_avg.lerp_(grad, 1 - beta1)
    let ea_out = s.cows[0].target(&s.exp_avg)?;
    let exp_avg = dst(&ea_out, &s.exp_avg).shallow_clone();
    let _ = s
        .exp_avg
        .f_lerp_tensor_out(&exp_avg, &grad, &scalar(1.0 - o.beta1)?)?;
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2): the
    // kernel multiplies the value into the first factor first.
    let es_out = s.cows[1].target(&s.exp_avg_sq)?;
    let mut exp_avg_sq = dst(&es_out, &s.exp_avg_sq).shallow_clone();
    let _ = s.exp_avg_sq.f_mul_out(&exp_avg_sq, &scalar(o.beta2)?)?;
    let _ = exp_avg_sq.f_addcmul_(&grad.f_mul(&scalar(1.0 - o.beta2)?)?, &grad)?;
    #[allow(
        clippy::cast_precision_loss,
        reason = "PyTorch keeps the step as a float"
    )]
    let step = (s.step + 1) as f64;
    let bias_correction1 = 1.0 - o.beta1.powf(step);
    let bias_correction2 = 1.0 - o.beta2.powf(step);
    let step_size = o.lr / bias_correction1;
    let bias_correction2_sqrt = bias_correction2.powf(0.5);
    let max_exp_avg_sq = match &s.max_exp_avg_sq {
        Some(m) => {
            // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
            let m_out = s.cows[2].target(m)?;
            let larger = dst(&m_out, m).shallow_clone();
            let _ = m.f_maximum_out(&larger, &exp_avg_sq)?;
            Some(larger)
        }
        None => None,
    };
    let second = max_exp_avg_sq.as_ref().unwrap_or(&exp_avg_sq);
    let mut denom = second.f_sqrt()?.f_div(&scalar(bias_correction2_sqrt)?)?;
    let _ = denom.f_add_(&scalar(o.eps)?)?;
    // param.addcdiv_(exp_avg, denom, value=-step_size)
    let _ = param.f_add_out(p_dst, &exp_avg.f_div(&denom)?.f_mul(&scalar(-step_size)?)?)?;
    Ok(Next {
        param: p_out,
        exp_avg,
        exp_avg_sq,
        max_exp_avg_sq,
    })
}
