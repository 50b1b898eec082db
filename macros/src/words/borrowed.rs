//! Words whose argument is a value the user wrote, type-checked by rustc:
//! `eval(model)` / `train(model)` (borrowed) and `with(scope)`.

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::spanned::Spanned;

use super::forms;
use crate::expand::cx::Cx;
use crate::word::Checked;

/// The one argument, which `read` reports missing before a build.
fn only(checked: &Checked) -> &syn::Expr {
    forms::positional(checked)
        .first()
        .copied()
        .expect("`read` reports a missing argument")
}

/// `RT::__private::<word>(&(model))`: a reference, so the scope borrows the
/// model rather than moving it; spanned on the model so a non-`Trainable`
/// is reported there.
pub(crate) fn model(checked: &Checked, cx: &Cx) -> TokenStream {
    let model = only(checked);
    let span = model.span();
    let private = cx.private(span);
    let f = syn::Ident::new(checked.word.name, checked.span);
    quote_spanned!(span=> #private::#f(&(#model)))
}

/// `RT::__private::with(scope)`, spanned on the user's expression: a
/// non-`Scope` gets the runtime's `on_unimplemented` note right there.
pub(crate) fn with(checked: &Checked, cx: &Cx) -> TokenStream {
    let scope = only(checked);
    let span = scope.span();
    let private = cx.private(span);
    quote_spanned!(span=> #private::with(#scope))
}
