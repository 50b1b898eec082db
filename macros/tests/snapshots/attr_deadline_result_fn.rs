// Input:
//     #[scope(deadline(budget), timed)]
//     fn serve(x: &Tensor) -> anyhow::Result<Tensor> {
//         Ok(x.f_mm(x)?)
//     }
// Expansion:

fn serve(x: &Tensor) -> anyhow::Result<Tensor> {
    let mut __tch_scope_guard0 = match ::tch_scope::__private::enter(
        ::tch_scope::__private::deadline(budget),
    ) {
        ::core::result::Result::Ok(__tch_scope_entered) => __tch_scope_entered,
        ::core::result::Result::Err(__tch_scope_err) => {
            return {
                use ::tch_scope::__private::{
                    LeaveInfallible as _, LeavePanicking as _, LeaveWithErr as _,
                };
                (&&&::tch_scope::__private::Leave::<
                    anyhow::Result<Tensor>,
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
                    ::core::concat!(::core::module_path!(), "::serve"),
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
                    anyhow::Result<Tensor>,
                    _,
                >::of(&__tch_scope_err))
                    .leave(__tch_scope_err)
            };
        }
    };
    match match ::tch_scope::__private::catching(
        &__tch_scope_guard0,
        move || -> anyhow::Result<Tensor> { Ok(x.f_mm(x)?) },
    ) {
        ::core::result::Result::Ok(__tch_scope_value) => __tch_scope_value,
        ::core::result::Result::Err(__tch_scope_err) => {
            let __tch_scope_outcome = ::tch_scope::__private::Outcome::Failed;
            __tch_scope_guard1.saw(__tch_scope_outcome);
            __tch_scope_guard0.saw(__tch_scope_outcome);
            return {
                use ::tch_scope::__private::{
                    LeaveInfallible as _, LeavePanicking as _, LeaveWithErr as _,
                };
                (&&&::tch_scope::__private::Leave::<
                    anyhow::Result<Tensor>,
                    _,
                >::of(&__tch_scope_err))
                    .leave(__tch_scope_err)
            };
        }
    } {
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
                        anyhow::Result<Tensor>,
                        _,
                    >::of(&__tch_scope_err))
                        .leave(__tch_scope_err)
                };
            }
            __tch_scope_value
        }
    }
}
