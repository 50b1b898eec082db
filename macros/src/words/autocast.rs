//! `autocast(cpu, bf16)`, `autocast(cuda)`: a device type and a dtype,
//! each a fixed word, with PyTorch's default dtype per device.

use proc_macro2::TokenStream;
use quote::quote_spanned;

use super::forms::{arg_span, as_ident};
use crate::ast::{Arg, Item};
use crate::word::{Cx, Word};

fn ident(arg: &Arg) -> Option<&syn::Ident> {
    match arg {
        Arg::Expr(e) => as_ident(e),
        Arg::Named(..) => None,
    }
}

const AUTOCAST_FORMS: &str = "write `autocast(cpu, bf16)`, `autocast(cpu, f16)`, `autocast(cuda, f16)` or `autocast(cuda, bf16)`";

pub(crate) fn check(_: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let Some(args) = &item.args else {
        return Err(syn::Error::new(
            item.name.span(),
            format!("`autocast` needs a device type: {AUTOCAST_FORMS}"),
        ));
    };
    let mut list = args.list.iter();
    let Some(first) = list.next() else {
        return Err(syn::Error::new(
            args.span,
            format!("`autocast` needs a device type: {AUTOCAST_FORMS}"),
        ));
    };
    let device = match ident(first).map(ToString::to_string).as_deref() {
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
        Some(arg) => match ident(arg).map(ToString::to_string).as_deref() {
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
    Ok(quote_spanned!(span=> #private::#f()))
}
