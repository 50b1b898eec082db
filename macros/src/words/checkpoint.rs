//! `checkpoint(vs, "model.ot")`, `checkpoint(vs, path, resume)`,
//! `checkpoint(vs, path, save_on_failure = false)`: a VarStore (borrowed), a
//! path, and optional `resume` and `save_on_failure` flags, all of them the
//! row's params, read by the shared `forms::options`.

use proc_macro2::TokenStream;
use syn::Expr;
use syn::spanned::Spanned;

use super::forms;
use crate::ast::Item;
use crate::word::{Cx, Word};

pub(crate) fn check(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let values = forms::options(word, item)?;
    let value = |param| forms::value(word, &values, param).cloned();
    let (Some(vs), Some(path)) = (value("vs"), value("path")) else {
        unreachable!("`options` reports a missing required param")
    };
    // A reference, so the scope borrows the VarStore instead of moving it.
    let vs: Expr = syn::parse_quote_spanned!(vs.span()=> &(#vs));
    let resume = value("resume").unwrap_or_else(|| syn::parse_quote!(false));
    let save_on_failure = value("save_on_failure").unwrap_or_else(|| syn::parse_quote!(true));
    Ok(forms::private_call(
        word,
        item,
        cx,
        &[vs, path, resume, save_on_failure],
    ))
}
