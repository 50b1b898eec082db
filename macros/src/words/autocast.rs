//! `autocast(cpu, bf16)`, `autocast(cuda)`, `autocast(cuda, f16, enabled =
//! b, cache = b)`: a device type and a dtype, each a fixed word, with
//! PyTorch's default dtype per device, then `torch.autocast`'s `enabled`
//! and `cache_enabled` as named options. All of them are the row's params,
//! read by the shared `forms::read`.

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::spanned::Spanned;

use super::choice;
use crate::expand::cx::Cx;
use crate::word::{Checked, Choice, Given};

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

/// `RT::__private::autocast_<device>_<dtype>()`, then its options as
/// builder calls.
pub(crate) fn build(checked: &Checked, cx: &Cx) -> TokenStream {
    let chosen = |param| {
        (checked.given(param))
            .and_then(|g| choice::words(&g.value).pop())
            .map(|w| w.to_string())
    };
    let device = chosen("device_type").expect("`read` reports a missing device type");
    // PyTorch's defaults: bf16 on the CPU, f16 on CUDA.
    let dtype = chosen("dtype").unwrap_or_else(|| match device.as_str() {
        "cpu" => "bf16".to_owned(),
        _ => "f16".to_owned(),
    });
    let f = format!("autocast_{device}_{dtype}");
    let span = checked.span;
    let (private, f) = (cx.private(span), syn::Ident::new(&f, span));
    // The runtime's builder methods of the same names, in the order written
    // (so the user's expressions are evaluated in that order).
    let mut options: Vec<(&str, &Given)> = ["enabled", "cache"]
        .into_iter()
        .filter_map(|name| Some((name, checked.given(name)?)))
        .collect();
    options.sort_by_key(|(_, g)| g.index);
    let options = options.iter().map(|(name, given)| {
        let value = &given.value;
        let method = syn::Ident::new(name, value.span());
        quote_spanned!(value.span()=> .#method(#value))
    });
    quote_spanned!(span=> #private::#f() #(#options)*)
}
