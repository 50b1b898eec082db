// Input:
//     #[scope(device(0), no_grad)]
//     fn evaluate(model: &Model) -> anyhow::Result<f64> {
//         let loss = model.loss()?;
//         Ok(loss.double_value(&[]))
//     }
// Expansion:

fn evaluate(model: &Model) -> anyhow::Result<f64> {
    let mut __tch_scope_guard0 = match ::tch_scope::__private::enter(
        ::tch_scope::__private::device_cuda(0usize),
    ) {
        ::core::result::Result::Ok(__tch_scope_entered) => __tch_scope_entered,
        ::core::result::Result::Err(__tch_scope_err) => {
            return {
                use ::tch_scope::__private::{
                    LeaveInfallible as _, LeavePanicking as _, LeaveWithErr as _,
                };
                (&&&::tch_scope::__private::Leave::<
                    anyhow::Result<f64>,
                    _,
                >::of(&__tch_scope_err))
                    .leave(__tch_scope_err)
            };
        }
    };
    let __tch_scope_guard1 = match ::tch_scope::__private::enter(
        ::tch_scope::__private::no_grad(),
    ) {
        ::core::result::Result::Ok(__tch_scope_entered) => __tch_scope_entered,
        ::core::result::Result::Err(__tch_scope_err) => {
            let __tch_scope_outcome = ::tch_scope::__private::Outcome::Failed;
            __tch_scope_guard0.saw(__tch_scope_outcome);
            return {
                use ::tch_scope::__private::{
                    LeaveInfallible as _, LeavePanicking as _, LeaveWithErr as _,
                };
                (&&&::tch_scope::__private::Leave::<
                    anyhow::Result<f64>,
                    _,
                >::of(&__tch_scope_err))
                    .leave(__tch_scope_err)
            };
        }
    };
    {
        let loss = model.loss()?;
        Ok(loss.double_value(&[]))
    }
}
