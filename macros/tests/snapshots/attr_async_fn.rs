// Input:
//     #[inference_mode]
//     pub async fn serve(&self, request: Request) -> Response {
//         let batch = self.queue.next().await;
//         self.model.forward(&batch).into()
//     }
// Expansion:

impl Server {
    pub async fn serve(&self, request: Request) -> Response {
        let __tch_scope_fut = ::tch_scope::__private::Spanned::new(
            ::tch_scope::__private::Chain(
                ::tch_scope::__private::inference_mode(),
                ::tch_scope::__private::End,
            ),
            ::tch_scope::__private::End,
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
                    let __tch_scope_ret: Response = loop {};
                    return __tch_scope_ret;
                }
                {
                    let batch = self.queue.next().await;
                    self.model.forward(&batch).into()
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
}
