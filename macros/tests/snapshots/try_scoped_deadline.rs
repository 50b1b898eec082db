// Input:
//     try_scoped!(no_grad, deadline(budget) => model.forward(&x))
// Expansion:

fn expansion() {
    match ::tch_scope::__private::try_enter(::tch_scope::__private::no_grad()) {
        ::core::result::Result::Err(__tch_scope_err) => {
            ::core::result::Result::Err(__tch_scope_err)
        }
        ::core::result::Result::Ok(mut __tch_scope_guard0) => {
            let __tch_scope_result = match ::tch_scope::__private::try_enter(
                ::tch_scope::__private::deadline(budget),
            ) {
                ::core::result::Result::Err(__tch_scope_err) => {
                    let __tch_scope_outcome = ::tch_scope::__private::Outcome::Failed;
                    __tch_scope_guard0.saw(__tch_scope_outcome);
                    ::core::result::Result::Err(__tch_scope_err)
                }
                ::core::result::Result::Ok(mut __tch_scope_guard1) => {
                    let __tch_scope_result = match ::tch_scope::__private::catching(
                        &__tch_scope_guard1,
                        || model.forward(&x),
                    ) {
                        ::core::result::Result::Ok(__tch_scope_value) => {
                            ::core::result::Result::Ok(__tch_scope_value)
                        }
                        ::core::result::Result::Err(__tch_scope_err) => {
                            let __tch_scope_outcome = ::tch_scope::__private::Outcome::Failed;
                            __tch_scope_guard1.saw(__tch_scope_outcome);
                            __tch_scope_guard0.saw(__tch_scope_outcome);
                            ::core::result::Result::Err(__tch_scope_err)
                        }
                    };
                    #[allow(unreachable_code)]
                    let __tch_scope_result = ::tch_scope::__private::finish(
                        __tch_scope_guard1,
                        __tch_scope_result,
                    );
                    __tch_scope_result
                }
            };
            #[allow(unreachable_code)]
            let __tch_scope_result = ::tch_scope::__private::finish(
                __tch_scope_guard0,
                __tch_scope_result,
            );
            __tch_scope_result
        }
    }
}
