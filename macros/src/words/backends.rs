//! Precision and kernel choice: `matmul_precision("high")`,
//! `cudnn(benchmark = true, ..)`, `sdpa(math, flash)`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, Lit};

use super::forms::{self, arg_span};
use crate::ast::Item;
use crate::errors::Errors;
use crate::word::{Cx, Word};

const PRECISIONS: [&str; 3] = ["highest", "high", "medium"];

/// A literal name is checked here; any other `&str` expression on entry.
pub(crate) fn matmul_precision(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let args = forms::positional(word, item)?;
    if let Expr::Lit(lit) = &args[0]
        && let Lit::Str(s) = &lit.lit
    {
        let name = s.value();
        if !PRECISIONS.contains(&name.as_str()) {
            let lower = name.to_lowercase();
            let hint = if PRECISIONS.contains(&lower.as_str()) {
                format!("write `\"{lower}\"` (lower case)")
            } else {
                "write `\"highest\"`, `\"high\"` or `\"medium\"`".to_owned()
            };
            return Err(syn::Error::new(
                s.span(),
                format!("`{name}` is not a float32 matmul precision: {hint}"),
            ));
        }
    }
    Ok(forms::private_call(word, item, cx, &args))
}

/// `cudnn(enabled = .., benchmark = .., deterministic = .., allow_tf32 = ..)`:
/// each flag optional, at least one.
pub(crate) fn cudnn(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let values = forms::options(word, item)?;
    if values.iter().all(Option::is_none) {
        let span = item.args.as_ref().map_or(item.name.span(), |a| a.span);
        return Err(syn::Error::new(
            span,
            "`cudnn` changes only the flags written, and none is: write at least one, \
             as in `cudnn(benchmark = true)`",
        ));
    }
    let flags: Vec<TokenStream> = values
        .iter()
        .map(|v| match v {
            Some(e) => quote_spanned!(e.span()=> ::core::option::Option::Some(#e)),
            None => quote!(::core::option::Option::None),
        })
        .collect();
    Ok(forms::private_call(word, item, cx, &flags))
}

const BACKENDS: [(&str, &str); 4] = [
    ("flash", "Flash"),
    ("mem_efficient", "MemEfficient"),
    ("math", "Math"),
    ("cudnn", "Cudnn"),
];

const SDPA_FORMS: &str =
    "list the backends to keep, of `math`, `flash`, `mem_efficient` and `cudnn`: `sdpa(math)`";

/// Our name for one of PyTorch's `SDPBackend` names.
fn python_name(name: &str) -> Option<&'static str> {
    match name.to_ascii_lowercase().as_str() {
        "flash_attention" => Some("flash"),
        "efficient_attention" | "efficient" | "mem_efficient_attention" => Some("mem_efficient"),
        "cudnn_attention" => Some("cudnn"),
        "math" => Some("math"),
        _ => None,
    }
}

/// `sdpa(math, flash, ..)`: a non-empty list of backend names, each once.
pub(crate) fn sdpa(_: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let span = item.name.span();
    let list = item.args.as_ref().map_or(&[][..], |a| &a.list[..]);
    if list.is_empty() {
        let at = item.args.as_ref().map_or(span, |a| a.span);
        return Err(syn::Error::new(
            at,
            format!("`sdpa` needs at least one backend: {SDPA_FORMS}"),
        ));
    }
    let private = cx.private(span);
    let mut errors = Errors::default();
    let mut seen = Vec::new();
    let mut variants = Vec::new();
    for arg in list {
        let name = arg.ident().map(ToString::to_string);
        let Some(&(name, variant)) = name
            .as_deref()
            .and_then(|n| BACKENDS.iter().find(|(b, _)| *b == n))
        else {
            let message = match name.as_deref().and_then(python_name) {
                Some(ours) => format!(
                    "`{}` is spelled `{ours}` here: {SDPA_FORMS}",
                    name.unwrap_or_default()
                ),
                None => format!("not an attention backend: {SDPA_FORMS}"),
            };
            errors.push(syn::Error::new(arg_span(arg), message));
            continue;
        };
        if seen.contains(&name) {
            errors.push(syn::Error::new(
                arg_span(arg),
                format!("`{name}` is listed twice in `sdpa`; keep one"),
            ));
            continue;
        }
        seen.push(name);
        let v = syn::Ident::new(variant, arg_span(arg));
        variants.push(quote_spanned!(arg_span(arg)=> #private::SdpaBackend::#v));
    }
    errors.finish()?;
    Ok(quote_spanned!(span=> #private::sdpa([#(#variants),*])))
}
