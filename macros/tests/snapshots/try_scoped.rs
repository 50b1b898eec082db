// Input:
//     try_scoped!(device(cpu), no_grad => { let y = step(&x)?; y.sum(Kind::Float) })
// Expansion:

fn expansion() {
    match ::tch_scope::__private::try_enter(::tch_scope::__private::device_cpu()) {
        ::core::result::Result::Err(__tch_scope_err) => {
            ::core::result::Result::Err(__tch_scope_err)
        }
        ::core::result::Result::Ok(mut __tch_scope_guard0) => {
            let __tch_scope_result = match ::tch_scope::__private::try_enter(
                ::tch_scope::__private::no_grad(),
            ) {
                ::core::result::Result::Err(__tch_scope_err) => {
                    let __tch_scope_outcome = ::tch_scope::__private::Outcome::Failed;
                    __tch_scope_guard0.saw(__tch_scope_outcome);
                    ::core::result::Result::Err(__tch_scope_err)
                }
                ::core::result::Result::Ok(__tch_scope_guard1) => {
                    let __tch_scope_result = ::core::result::Result::Ok({
                        let y = step(&x)?;
                        y.sum(Kind::Float)
                    });
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
