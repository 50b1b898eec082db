// Input:
//     #[no_grad]
//     /// Predicts.
//     #[inline]
//     #[track_caller]
//     pub(crate) fn predict(model: &Model, x: &Tensor) -> Tensor {
//         model.forward(x)
//     }
// Expansion:

/// Predicts.
#[inline]
#[track_caller]
pub(crate) fn predict(model: &Model, x: &Tensor) -> Tensor {
    let __tch_scope_guard0 = ::tch_scope::__private::enter_or_panic(
        ::tch_scope::__private::no_grad(),
    );
    { model.forward(x) }
}
