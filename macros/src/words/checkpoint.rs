//! `checkpoint(vs, "model.ot")`, `checkpoint(vs, path, resume)`,
//! `checkpoint(vs, path, save_on_failure = false)`: a VarStore (borrowed), a
//! path, and optional `resume` and `save_on_failure` flags, all of them the
//! row's params, read by the shared `forms::read`.

use proc_macro2::TokenStream;
use syn::Expr;
use syn::spanned::Spanned;

use super::forms;
use crate::expand::cx::Cx;
use crate::word::Checked;

pub(crate) fn build(checked: &Checked, cx: &Cx) -> TokenStream {
    let value = |param| checked.value(param).cloned();
    let (Some(vs), Some(path)) = (value("vs"), value("path")) else {
        unreachable!("`read` reports a missing required param")
    };
    // A reference, so the scope borrows the VarStore instead of moving it.
    let vs: Expr = syn::parse_quote_spanned!(vs.span()=> &(#vs));
    let resume = value("resume").unwrap_or_else(|| syn::parse_quote!(false));
    let save_on_failure = value("save_on_failure").unwrap_or_else(|| syn::parse_quote!(true));
    forms::private_call(checked, cx, &[vs, path, resume, save_on_failure])
}
