// Input:
//     try_scoped!(inference_mode => fetch(url).await)
// Expansion:

fn expansion() {
    {
        ::tch_scope::__private::scope_result(
            ::tch_scope::__private::Spanned::new(
                    ::tch_scope::__private::Chain(
                        ::tch_scope::__private::inference_mode(),
                        ::tch_scope::__private::End,
                    ),
                    ::tch_scope::__private::End,
                    async { fetch(url).await },
                )
                .await,
        )
    }
}
