//! `autocast(cpu, bf16)`, `autocast(cuda)`, `autocast(cuda, f16, enabled =
//! b, cache = b)`: a device type and a dtype, each a fixed word, with
//! PyTorch's default dtype per device, then `torch.autocast`'s `enabled`
//! and `cache_enabled` as named options. All of them are the row's params,
//! read by the shared `forms::read`.

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::spanned::Spanned;

use super::forms;
use crate::ast::Item;
use crate::errors::Errors;
use crate::word::{Choice, Cx, Word};

/// `autocast`'s first argument.
pub(crate) const DEVICE_TYPES: Choice = Choice {
    what: "device type",
    words: &[("cpu", ""), ("cuda", "")],
    aliases: &[],
    strings: false,
};

/// `autocast`'s second argument, with PyTorch's names for the two.
pub(crate) const DTYPES: Choice = Choice {
    what: "dtype",
    words: &[("bf16", ""), ("f16", "")],
    aliases: &[("bfloat16", "bf16"), ("float16", "f16"), ("half", "f16")],
    strings: false,
};

pub(crate) fn check(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    let written = forms::read(word, item, &mut errors);
    errors.finish()?;
    let chosen = |param| {
        forms::given(word, &written, param)
            .and_then(|g| forms::words(&g.value).pop())
            .map(|w| w.to_string())
    };
    let device = chosen("device_type").expect("`read` reports a missing device type");
    // PyTorch's defaults: bf16 on the CPU, f16 on CUDA.
    let dtype = chosen("dtype").unwrap_or_else(|| match device.as_str() {
        "cpu" => "bf16".to_owned(),
        _ => "f16".to_owned(),
    });
    let f = format!("autocast_{device}_{dtype}");
    let span = item.name.span();
    let (private, f) = (cx.private(span), syn::Ident::new(&f, span));
    // The runtime's builder methods of the same names, in the order written
    // (so the user's expressions are evaluated in that order).
    let mut options: Vec<(&str, &forms::Given)> = ["enabled", "cache"]
        .into_iter()
        .filter_map(|name| Some((name, forms::given(word, &written, name)?)))
        .collect();
    options.sort_by_key(|(_, g)| g.index);
    let options = options.iter().map(|(name, given)| {
        let value = &given.value;
        let method = syn::Ident::new(name, value.span());
        quote_spanned!(value.span()=> .#method(#value))
    });
    Ok(quote_spanned!(span=> #private::#f() #(#options)*))
}
