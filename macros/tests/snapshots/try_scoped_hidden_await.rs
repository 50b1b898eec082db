// Input:
//     try_scoped!(inference_mode => fetch!(url))
// Expansion:

fn expansion() {
    {
        let __tch_scope_watch = ::tch_scope::__private::watch_hidden_await(
            "try_scoped!",
            "inference_mode",
        );
        match ::tch_scope::__private::try_enter(
            ::tch_scope::__private::inference_mode(),
        ) {
            ::core::result::Result::Err(__tch_scope_err) => {
                ::core::result::Result::Err(__tch_scope_err)
            }
            ::core::result::Result::Ok(__tch_scope_guard0) => {
                let __tch_scope_result = ::core::result::Result::Ok(fetch!(url));
                #[allow(unreachable_code)]
                let __tch_scope_result = ::tch_scope::__private::finish(
                    __tch_scope_guard0,
                    __tch_scope_result,
                );
                __tch_scope_result
            }
        }
    }
}
