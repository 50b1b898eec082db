// Input:
//     #[scope(no_grad, timed, eval(model))]
//     async fn validate(model: &Net, batches: Batches) -> f64 {
//         let batch = batches.next().await;
//         model.loss(&batch)
//     }
// Expansion:

async fn validate(model: &Net, batches: Batches) -> f64 {
    let __tch_scope_fut = ::tch_scope::__private::Spanned::new(
        ::tch_scope::__private::Chain(
            ::tch_scope::__private::no_grad(),
            ::tch_scope::__private::Chain(
                ::tch_scope::__private::eval(&(model)),
                ::tch_scope::__private::End,
            ),
        ),
        ::tch_scope::__private::Chain(
            ::tch_scope::__private::timed(
                {
                    static __TCH_SCOPE_SITE: ::tch_scope::__private::Site = ::tch_scope::__private::Site::new(
                        ::core::concat!(::core::module_path!(), "::validate"),
                    );
                    &__TCH_SCOPE_SITE
                },
                ::tch_scope::__private::SyncMode::Auto,
            ),
            ::tch_scope::__private::End,
        ),
        async move {
            #[allow(
                unknown_lints,
                unreachable_code,
                clippy::diverging_sub_expression,
                clippy::empty_loop,
                clippy::let_unit_value,
                clippy::needless_return,
                clippy::unreachable
            )]
            if false {
                let __tch_scope_ret: f64 = loop {};
                return __tch_scope_ret;
            }
            {
                let batch = batches.next().await;
                model.loss(&batch)
            }
        },
    );
    match __tch_scope_fut.await {
        ::core::result::Result::Ok(__tch_scope_value) => __tch_scope_value,
        ::core::result::Result::Err(__tch_scope_err) => {
            ::tch_scope::__private::panic_scope_error(__tch_scope_err)
        }
    }
}
