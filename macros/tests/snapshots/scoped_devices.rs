// Input:
//     scoped!(device("cuda:1"), grad(training) => model.forward(&x))
// Expansion:

fn expansion() {
    {
        let __tch_scope_guard0 = ::tch_scope::__private::enter_or_panic(
            ::tch_scope::__private::device_cuda(1usize),
        );
        let __tch_scope_guard1 = ::tch_scope::__private::enter_or_panic(
            ::tch_scope::__private::grad(training),
        );
        let __tch_scope_value = match () {
            () => model.forward(&x),
        };
        #[allow(unreachable_code)]
        {
            ::tch_scope::__private::finish_or_panic(__tch_scope_guard1);
            ::tch_scope::__private::finish_or_panic(__tch_scope_guard0);
        }
        __tch_scope_value
    }
}
