//! `autocast(cpu, bf16)`, `autocast(cuda)`, `autocast(cuda, f16, enabled =
//! b, cache = b)`: a device type and a dtype, each a fixed word, with
//! PyTorch's default dtype per device, then `torch.autocast`'s `enabled`
//! and `cache_enabled` as named flags.

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::spanned::Spanned;

use super::forms::arg_span;
use crate::ast::{Arg, Item};
use crate::word::{Cx, Word};

const AUTOCAST_FORMS: &str = "write `autocast(cpu, bf16)`, `autocast(cpu, f16)`, `autocast(cuda, f16)` or `autocast(cuda, bf16)`, then optionally `enabled = b`, `cache = b`";

pub(crate) fn check(_: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let Some(args) = &item.args else {
        return Err(syn::Error::new(
            item.name.span(),
            format!("`autocast` needs a device type: {AUTOCAST_FORMS}"),
        ));
    };
    let (named, positional): (Vec<&Arg>, Vec<&Arg>) =
        args.list.iter().partition(|a| matches!(a, Arg::Named(..)));
    let options = flags(&named)?;
    let mut list = positional.into_iter();
    let Some(first) = list.next() else {
        return Err(syn::Error::new(
            args.span,
            format!("`autocast` needs a device type: {AUTOCAST_FORMS}"),
        ));
    };
    let device = match first.ident().map(ToString::to_string).as_deref() {
        Some(d @ ("cpu" | "cuda")) => d.to_owned(),
        _ => {
            return Err(syn::Error::new(
                arg_span(first),
                format!("autocast's device type is `cpu` or `cuda`: {AUTOCAST_FORMS}"),
            ));
        }
    };
    // PyTorch's defaults: bf16 on the CPU, f16 on CUDA.
    let dtype = match list.next() {
        None if device == "cpu" => "bf16".to_owned(),
        None => "f16".to_owned(),
        Some(arg) => match arg.ident().map(ToString::to_string).as_deref() {
            Some(t @ ("bf16" | "f16")) => t.to_owned(),
            Some(t @ ("bfloat16" | "float16" | "half")) => {
                let short = if t == "bfloat16" { "bf16" } else { "f16" };
                return Err(syn::Error::new(
                    arg_span(arg),
                    format!("`{t}` is spelled `{short}` here: {AUTOCAST_FORMS}"),
                ));
            }
            _ => {
                return Err(syn::Error::new(
                    arg_span(arg),
                    format!("autocast's dtype is `bf16` or `f16`: {AUTOCAST_FORMS}"),
                ));
            }
        },
    };
    if let Some(extra) = list.next() {
        return Err(syn::Error::new(
            arg_span(extra),
            format!("`autocast` takes a device type and a dtype: {AUTOCAST_FORMS}"),
        ));
    }
    let f = match (device.as_str(), dtype.as_str()) {
        ("cpu", "bf16") => "autocast_cpu_bf16",
        ("cpu", _) => "autocast_cpu_f16",
        (_, "f16") => "autocast_cuda_f16",
        _ => "autocast_cuda_bf16",
    };
    let span = item.name.span();
    let (private, f) = (cx.private(span), syn::Ident::new(f, span));
    let options = options.iter().map(|(key, value)| {
        let method = syn::Ident::new(key, value.span());
        quote_spanned!(value.span()=> .#method(#value))
    });
    Ok(quote_spanned!(span=> #private::#f() #(#options)*))
}

/// `enabled = b`, `cache = b`: each at most once; the runtime's builder
/// methods of the same names take them.
fn flags<'a>(named: &[&'a Arg]) -> syn::Result<Vec<(&'static str, &'a syn::Expr)>> {
    let mut out: Vec<(&'static str, &syn::Expr)> = Vec::new();
    for arg in named {
        let Arg::Named(key, value) = arg else {
            continue;
        };
        let Some(name) = ["enabled", "cache"].into_iter().find(|n| key == n) else {
            let hint = if key == "cache_enabled" {
                "`cache_enabled` is spelled `cache` here".to_owned()
            } else {
                format!("`autocast` has no argument `{key}`")
            };
            return Err(syn::Error::new(
                key.span(),
                format!("{hint}: {AUTOCAST_FORMS}"),
            ));
        };
        if out.iter().any(|(n, _)| *n == name) {
            return Err(syn::Error::new(
                key.span(),
                format!("`{name}` is given twice to `autocast`; keep one"),
            ));
        }
        out.push((name, value));
    }
    Ok(out)
}
