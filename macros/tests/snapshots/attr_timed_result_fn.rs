// Input:
//     #[scope(no_grad, timed)]
//     fn step(batch: &Batch) -> io::Result<f64> {
//         let loss = batch.loss()?;
//         Ok(loss)
//     }
// Expansion:

fn step(batch: &Batch) -> io::Result<f64> {
    let mut __tch_scope_guard0 = match ::tch_scope::__private::enter(
        ::tch_scope::__private::no_grad(),
    ) {
        ::core::result::Result::Ok(__tch_scope_entered) => __tch_scope_entered,
        ::core::result::Result::Err(__tch_scope_err) => {
            return {
                use ::tch_scope::__private::{
                    LeaveInfallible as _, LeavePanicking as _, LeaveWithErr as _,
                };
                (&&&::tch_scope::__private::Leave::<
                    io::Result<f64>,
                    _,
                >::of(&__tch_scope_err))
                    .leave(__tch_scope_err)
            };
        }
    };
    let mut __tch_scope_guard1 = match ::tch_scope::__private::enter(
        ::tch_scope::__private::timed(
            {
                static __TCH_SCOPE_SITE: ::tch_scope::__private::Site = ::tch_scope::__private::Site::new(
                    ::core::concat!(::core::module_path!(), "::step"),
                );
                &__TCH_SCOPE_SITE
            },
            ::tch_scope::__private::SyncMode::Auto,
        ),
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
                    io::Result<f64>,
                    _,
                >::of(&__tch_scope_err))
                    .leave(__tch_scope_err)
            };
        }
    };
    match ::tch_scope::__private::call(move || -> io::Result<f64> {
        let loss = batch.loss()?;
        Ok(loss)
    }) {
        __tch_scope_value => {
            let __tch_scope_outcome = {
                use ::tch_scope::__private::{SeenAny as _, SeenResult as _};
                (&::tch_scope::__private::Seen(&__tch_scope_value)).outcome()
            };
            __tch_scope_guard1.saw(__tch_scope_outcome);
            __tch_scope_guard0.saw(__tch_scope_outcome);
            let __tch_scope_exit = ::core::result::Result::Ok(());
            let __tch_scope_exit = ::tch_scope::__private::finish_after(
                __tch_scope_guard1,
                __tch_scope_exit,
            );
            let __tch_scope_exit = ::tch_scope::__private::finish_after(
                __tch_scope_guard0,
                __tch_scope_exit,
            );
            if let ::core::result::Result::Err(__tch_scope_err) = __tch_scope_exit {
                return {
                    use ::tch_scope::__private::{
                        LeaveInfallible as _, LeavePanicking as _, LeaveWithErr as _,
                    };
                    (&&&::tch_scope::__private::Leave::<
                        io::Result<f64>,
                        _,
                    >::of(&__tch_scope_err))
                        .leave(__tch_scope_err)
                };
            }
            __tch_scope_value
        }
    }
}
