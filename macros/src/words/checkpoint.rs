//! `checkpoint(vs, "model.ot")`, `checkpoint(vs, path, resume)`,
//! `checkpoint(vs, path, save_on_panic = false)`: a VarStore (borrowed), a
//! path, and optional `resume` and `save_on_panic` flags.

use proc_macro2::TokenStream;
use syn::Expr;
use syn::spanned::Spanned;

use super::forms::{self, arg_span};
use crate::ast::{Arg, Item};
use crate::word::{Cx, Word};

const CHECKPOINT_FORMS: &str = "write `checkpoint(vs, \"model.ot\")`, `checkpoint(vs, \"model.ot\", resume)` to load it on entry, or `checkpoint(vs, \"model.ot\", save_on_panic = false)` to keep the last good file when the body panics";

pub(crate) fn check(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let needs = |span| {
        syn::Error::new(
            span,
            format!("`checkpoint` needs a VarStore and a path: {CHECKPOINT_FORMS}"),
        )
    };
    let Some(args) = &item.args else {
        return Err(needs(item.name.span()));
    };
    let mut exprs = Vec::new();
    let mut resume = None;
    let mut save_on_panic = None;
    for (i, arg) in args.list.iter().enumerate() {
        match (i, arg) {
            (0 | 1, Arg::Expr(e)) => exprs.push(e.clone()),
            (2.., Arg::Expr(_))
                if resume.is_none() && arg.ident().is_some_and(|id| id == "resume") =>
            {
                resume = Some(syn::parse_quote_spanned!(arg_span(arg)=> true));
            }
            (2.., Arg::Named(key, value)) if resume.is_none() && key == "resume" => {
                resume = Some(value.clone());
            }
            (2.., Arg::Named(key, value)) if save_on_panic.is_none() && key == "save_on_panic" => {
                save_on_panic = Some(value.clone());
            }
            _ => {
                return Err(syn::Error::new(
                    arg_span(arg),
                    format!("unexpected argument to `checkpoint`: {CHECKPOINT_FORMS}"),
                ));
            }
        }
    }
    if exprs.len() < 2 {
        return Err(needs(args.span));
    }
    let (vs, path) = (&exprs[0], &exprs[1]);
    // A reference, so the scope borrows the VarStore instead of moving it.
    let vs: Expr = syn::parse_quote_spanned!(vs.span()=> &(#vs));
    let resume = resume.unwrap_or_else(|| syn::parse_quote!(false));
    let save_on_panic = save_on_panic.unwrap_or_else(|| syn::parse_quote!(true));
    Ok(forms::private_call(
        word,
        item,
        cx,
        &[vs, path.clone(), resume, save_on_panic],
    ))
}
