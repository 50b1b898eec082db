// Input:
//     #[device("cuda:0")]
//     async fn load(path: &Path) -> io::Result<Tensor> {
//         let bytes = read(path).await?;
//         Ok(decode(&bytes))
//     }
// Expansion:

async fn load(path: &Path) -> io::Result<Tensor> {
    let __tch_scope_fut = ::tch_scope::__private::Spanned::new(
            ::tch_scope::__private::Chain(
                ::tch_scope::__private::device_cuda(0usize),
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
                    let __tch_scope_ret: io::Result<Tensor> = loop {};
                    return __tch_scope_ret;
                }
                {
                    let bytes = read(path).await?;
                    Ok(decode(&bytes))
                }
            },
        )
        .exit_errors_to_caller();
    match __tch_scope_fut.await {
        ::core::result::Result::Ok(__tch_scope_value) => {
            match ::tch_scope::__private::exit_error_after({
                use ::tch_scope::__private::{SeenAny as _, SeenResult as _};
                (&::tch_scope::__private::Seen(&__tch_scope_value)).outcome()
            }) {
                ::core::option::Option::None => __tch_scope_value,
                ::core::option::Option::Some(__tch_scope_err) => {
                    return {
                        use ::tch_scope::__private::{
                            LeaveInfallible as _, LeavePanicking as _, LeaveWithErr as _,
                        };
                        (&&&::tch_scope::__private::Leave::<
                            io::Result<Tensor>,
                            _,
                        >::of(&__tch_scope_err))
                            .leave(__tch_scope_err)
                    };
                }
            }
        }
        ::core::result::Result::Err(__tch_scope_err) => {
            return {
                use ::tch_scope::__private::{
                    LeaveInfallible as _, LeavePanicking as _, LeaveWithErr as _,
                };
                (&&&::tch_scope::__private::Leave::<
                    io::Result<Tensor>,
                    _,
                >::of(&__tch_scope_err))
                    .leave(__tch_scope_err)
            };
        }
    }
}
