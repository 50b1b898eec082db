//! Words whose argument is a value the user wrote, type-checked by rustc:
//! `eval(model)` / `train(model)` (borrowed) and `with(scope)`.

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::spanned::Spanned;

use super::forms;
use crate::ast::Item;
use crate::word::{Cx, Word};

/// `RT::__private::<word>(&(model))`: a reference, so the scope borrows the
/// model rather than moving it; spanned on the model so a non-`Trainable`
/// is reported there.
pub(crate) fn model(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let model = forms::positional(word, item)?.remove(0);
    let span = model.span();
    let private = cx.private(span);
    let f = syn::Ident::new(word.name, item.name.span());
    Ok(quote_spanned!(span=> #private::#f(&(#model))))
}

/// `RT::__private::with(scope)`, spanned on the user's expression: a
/// non-`Scope` gets the runtime's `on_unimplemented` note right there.
pub(crate) fn with(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let scope = forms::positional(word, item)?.remove(0);
    let span = scope.span();
    let private = cx.private(span);
    Ok(quote_spanned!(span=> #private::with(#scope)))
}
