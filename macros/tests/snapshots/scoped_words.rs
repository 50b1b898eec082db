// Input:
//     scoped!(device(0) if use_gpu, no_grad, inference_mode, with(Timer::new("fwd")) => { model.forward(&x) })
// Expansion:

fn expansion() {
    {
        let __tch_scope_guard0 = ::tch_scope::__private::enter_or_panic(
            ::tch_scope::__private::when(
                use_gpu,
                ::tch_scope::__private::device_cuda(0usize),
            ),
        );
        let __tch_scope_guard1 = ::tch_scope::__private::enter_or_panic(
            ::tch_scope::__private::no_grad(),
        );
        let __tch_scope_guard2 = ::tch_scope::__private::enter_or_panic(
            ::tch_scope::__private::inference_mode(),
        );
        let __tch_scope_guard3 = ::tch_scope::__private::enter_or_panic(
            ::tch_scope::__private::with(Timer::new("fwd")),
        );
        let __tch_scope_value = match () {
            () => model.forward(&x),
        };
        #[allow(unreachable_code)]
        {
            ::tch_scope::__private::finish_or_panic(__tch_scope_guard3);
            ::tch_scope::__private::finish_or_panic(__tch_scope_guard2);
            ::tch_scope::__private::finish_or_panic(__tch_scope_guard1);
            ::tch_scope::__private::finish_or_panic(__tch_scope_guard0);
        }
        __tch_scope_value
    }
}
