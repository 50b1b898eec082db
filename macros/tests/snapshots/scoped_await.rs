// Input:
//     scoped!(device(0), no_grad if !training => { let x = load().await; model.forward(&x) })
// Expansion:

fn expansion() {
    {
        match ::tch_scope::__private::Spanned::new(
                ::tch_scope::__private::Chain(
                    ::tch_scope::__private::device_cuda(0usize),
                    ::tch_scope::__private::Chain(
                        ::tch_scope::__private::when(
                            !training,
                            ::tch_scope::__private::no_grad(),
                        ),
                        ::tch_scope::__private::End,
                    ),
                ),
                ::tch_scope::__private::End,
                async {
                    let x = load().await;
                    model.forward(&x)
                },
            )
            .await
        {
            ::core::result::Result::Ok(__tch_scope_value) => __tch_scope_value,
            ::core::result::Result::Err(__tch_scope_err) => {
                ::tch_scope::__private::panic_scope_error(__tch_scope_err)
            }
        }
    }
}
