// Input:
//     #[eval(model)]
//     fn validate(model: &mut Net, x: &Tensor) -> f64 {
//         model.forward(x).double_value(&[])
//     }
// Expansion:

fn validate(model: &mut Net, x: &Tensor) -> f64 {
    let __tch_scope_guard0 = ::tch_scope::__private::enter_or_panic(
        ::tch_scope::__private::eval(&(model)),
    );
    { model.forward(x).double_value(&[]) }
}
