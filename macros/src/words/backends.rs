//! Precision and kernel choice: `matmul_precision("high")`,
//! `cudnn(benchmark = true, ..)`, `sdpa(math, flash)`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, Lit};

use super::forms;
use crate::ast::Item;
use crate::word::{Choice, Cx, Word};

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

/// `sdpa`'s backends, with PyTorch's `SDPBackend` names for them.
pub(crate) const SDPA_BACKENDS: Choice = Choice {
    what: "backend",
    words: &[
        ("math", ""),
        ("flash", ""),
        ("mem_efficient", ""),
        ("cudnn", ""),
    ],
    aliases: &[
        ("flash_attention", "flash"),
        ("efficient_attention", "mem_efficient"),
        ("efficient", "mem_efficient"),
        ("mem_efficient_attention", "mem_efficient"),
        ("cudnn_attention", "cudnn"),
    ],
    strings: false,
};

/// `sdpa(math, flash, ..)`: the row's one list param, a non-empty list of
/// backend names, each once, read by `forms::options`.
pub(crate) fn sdpa(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let values = forms::options(word, item)?;
    let backends = forms::value(word, &values, "backends").map_or_else(Vec::new, forms::words);
    let span = item.name.span();
    let private = cx.private(span);
    let variants = backends.iter().map(|b| {
        let variant = match b.to_string().as_str() {
            "flash" => "Flash",
            "mem_efficient" => "MemEfficient",
            "math" => "Math",
            _ => "Cudnn",
        };
        let v = syn::Ident::new(variant, b.span());
        quote_spanned!(b.span()=> #private::SdpaBackend::#v)
    });
    Ok(quote_spanned!(span=> #private::sdpa([#(#variants),*])))
}
