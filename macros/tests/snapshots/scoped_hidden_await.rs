// Input:
//     scoped!(no_grad, timed("step"), device(0) => { let x = settle!(load()); model.forward(&x) })
// Expansion:

fn expansion() {
    {
        let __tch_scope_watch = ::tch_scope::__private::watch_hidden_await(
            "scoped!",
            "no_grad`, `device",
        );
        let __tch_scope_guard0 = ::tch_scope::__private::enter_or_panic(
            ::tch_scope::__private::no_grad(),
        );
        let __tch_scope_guard1 = ::tch_scope::__private::enter_or_panic(
            ::tch_scope::__private::timed(
                {
                    static __TCH_SCOPE_SITE: ::tch_scope::__private::Site = ::tch_scope::__private::Site::new(
                        "step",
                    );
                    &__TCH_SCOPE_SITE
                },
                ::tch_scope::__private::SyncMode::Auto,
            ),
        );
        let __tch_scope_guard2 = ::tch_scope::__private::enter_or_panic(
            ::tch_scope::__private::device_cuda(0usize),
        );
        let __tch_scope_value = match () {
            () => {
                let x = settle!(load());
                model.forward(&x)
            }
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
