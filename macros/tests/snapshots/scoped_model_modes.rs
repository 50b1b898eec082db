// Input:
//     scoped!(no_grad, eval(model), train(self.encoder) if fine_tune => model.forward_ts(&[&x]))
// Expansion:

fn expansion() {
    {
        let __tch_scope_guard0 = ::tch_scope::__private::enter_or_panic(
            ::tch_scope::__private::no_grad(),
        );
        let __tch_scope_guard1 = ::tch_scope::__private::enter_or_panic(
            ::tch_scope::__private::eval(&(model)),
        );
        let __tch_scope_guard2 = ::tch_scope::__private::enter_or_panic(
            ::tch_scope::__private::when(
                fine_tune,
                ::tch_scope::__private::train(&(self.encoder)),
            ),
        );
        let __tch_scope_value = match () {
            () => model.forward_ts(&[&x]),
        };
        #[allow(unreachable_code)]
        {
            ::tch_scope::__private::finish_or_panic(__tch_scope_guard2);
            ::tch_scope::__private::finish_or_panic(__tch_scope_guard1);
            ::tch_scope::__private::finish_or_panic(__tch_scope_guard0);
        }
        __tch_scope_value
    }
}
