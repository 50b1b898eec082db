//! `checkpoint(vs, "model.ot")`, `checkpoint(vs, path, resume)`,
//! `checkpoint(vs, path, save_on_failure = false)`,
//! `checkpoint(vs, path, resume, optimizer = opt, every = 5, state = s)`: a
//! VarStore (borrowed), a path, optional `resume` and `save_on_failure`
//! flags, and an optional optimizer, save interval and run state (each
//! borrowed), all of them the row's params, read by the shared
//! `forms::read`.

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::Expr;
use syn::spanned::Spanned;

use super::forms;
use crate::errors::Errors;
use crate::expand::cx::Cx;
use crate::word::Checked;

/// A literal `every` below 1 (`every = 0`): there is no such interval.
pub(crate) fn check(checked: &Checked, errors: &mut Errors) {
    let Some(every) = checked.value("every") else {
        return;
    };
    let literal = match every {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(n),
            ..
        }) => n.base10_parse::<i64>().ok(),
        Expr::Unary(syn::ExprUnary {
            op: syn::UnOp::Neg(_),
            ..
        }) => Some(-1),
        _ => None,
    };
    if literal.is_some_and(|n| n < 1) {
        errors.push(syn::Error::new_spanned(
            every,
            "`every` is a number of steps, at least 1: write `every = 5` to save after every 5 steps",
        ));
    }
}

pub(crate) fn build(checked: &Checked, cx: &Cx) -> TokenStream {
    let value = |param| checked.value(param).cloned();
    let (Some(vs), Some(path)) = (value("vs"), value("path")) else {
        unreachable!("`read` reports a missing required param")
    };
    // A reference, so the scope borrows the VarStore instead of moving it.
    let vs: Expr = syn::parse_quote_spanned!(vs.span()=> &(#vs));
    let resume = value("resume").unwrap_or_else(|| syn::parse_quote!(false));
    let save_on_failure = value("save_on_failure").unwrap_or_else(|| syn::parse_quote!(true));
    let mut call = forms::private_call(checked, cx, &[vs, path, resume, save_on_failure]);
    // Borrowed too: the body keeps stepping the optimizer and changing
    // the state (both take `&self`) while the checkpoint reads them. The
    // optimizer through a method call, whose autoderef takes `opt` and
    // `&opt` alike (a function's `opt: &Adam` under the attribute).
    if let Some(opt) = value("optimizer") {
        let private = cx.private(opt.span());
        call = quote_spanned!(opt.span()=> #call.optimizer({
            use #private::CheckpointOptimizer as _;
            (#opt).tch_scope_checkpoint_optimizer()
        }));
    }
    if let Some(state) = value("state") {
        call = quote_spanned!(state.span()=> #call.state(&(#state)));
    }
    if let Some(every) = value("every") {
        call = quote_spanned!(every.span()=> #call.every(#every));
    }
    call
}
