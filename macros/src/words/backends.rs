//! Precision and kernel choice: `matmul_precision("high")`,
//! `cudnn(benchmark = true, ..)`, `sdpa(math, flash)`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, Lit};

use super::{choice, forms};
use crate::errors::Errors;
use crate::expand::cx::Cx;
use crate::word::{Checked, Choice};

const PRECISIONS: [&str; 3] = ["highest", "high", "medium"];

/// A literal name is checked here; any other `&str` expression on entry.
pub(crate) fn check_matmul_precision(checked: &Checked, errors: &mut Errors) {
    let Some(Expr::Lit(lit)) = checked.value("precision") else {
        return;
    };
    let Lit::Str(s) = &lit.lit else { return };
    let name = s.value();
    if PRECISIONS.contains(&name.as_str()) {
        return;
    }
    let lower = name.to_lowercase();
    let hint = if PRECISIONS.contains(&lower.as_str()) {
        format!("write `\"{lower}\"` (lower case)")
    } else {
        "write `\"highest\"`, `\"high\"` or `\"medium\"`".to_owned()
    };
    errors.push(syn::Error::new(
        s.span(),
        format!("`{name}` is not a float32 matmul precision: {hint}"),
    ));
}

/// `cudnn` changes only the flags written: at least one (a misspelt one
/// is already reported).
pub(crate) fn check_cudnn(checked: &Checked, errors: &mut Errors) {
    if !checked.tried.contains(&true) {
        errors.push(syn::Error::new(
            checked.args_span,
            "`cudnn` changes only the flags written, and none is: write at least one, \
             as in `cudnn(benchmark = true)`",
        ));
    }
}

/// `cudnn(enabled = .., benchmark = .., deterministic = .., allow_tf32 = ..)`:
/// each flag an `Option`, `None` where it is not written.
pub(crate) fn cudnn(checked: &Checked, cx: &Cx) -> TokenStream {
    let flags: Vec<TokenStream> = (checked.written.iter())
        .map(|given| match given {
            Some(g) => {
                let e = &g.value;
                quote_spanned!(e.span()=> ::core::option::Option::Some(#e))
            }
            None => quote!(::core::option::Option::None),
        })
        .collect();
    forms::private_call(checked, cx, &flags)
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
/// backend names, each once, read by `forms::read`.
pub(crate) fn sdpa(checked: &Checked, cx: &Cx) -> TokenStream {
    let backends = checked
        .value("backends")
        .map_or_else(Vec::new, choice::words);
    let span = checked.span;
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
    quote_spanned!(span=> #private::sdpa([#(#variants),*]))
}
