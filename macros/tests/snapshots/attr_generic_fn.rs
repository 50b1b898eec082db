// Input:
//     #[with(Timer::new("step"))]
//     unsafe fn step<'a, M, O: Optimizer>(model: &'a mut M, opt: &mut O) -> impl Fn() + 'a
//     where
//         M: Module + 'a,
//     {
//         opt.step();
//         move || model.reset()
//     }
// Expansion:

unsafe fn step<'a, M, O: Optimizer>(model: &'a mut M, opt: &mut O) -> impl Fn() + 'a
where
    M: Module + 'a,
{
    let __tch_scope_guard0 = ::tch_scope::__private::enter_or_panic(
        ::tch_scope::__private::with(Timer::new("step")),
    );
    {
        opt.step();
        move || model.reset()
    }
}
