//! `fork_rng`, `fork_rng(devices = [0, 1])`, `seed(n)`, `seed(n, devices =
//! [..])`: with `devices`, the constructor `<word>_devices` forks only the
//! listed CUDA generators.

use proc_macro2::TokenStream;
use quote::quote_spanned;

use super::forms;
use crate::ast::Item;
use crate::word::{Cx, Word};

pub(crate) fn check(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let values = forms::options(word, item)?;
    let devices = forms::value(word, &values, "devices");
    let args: Vec<&syn::Expr> = word
        .params
        .iter()
        .zip(&values)
        .filter(|(p, _)| p.name != "devices")
        .filter_map(|(_, v)| v.as_ref())
        .collect();
    let Some(devices) = devices else {
        return Ok(forms::private_call(word, item, cx, &args));
    };
    let span = item.name.span();
    let private = cx.private(span);
    let f = syn::Ident::new(&format!("{}_devices", word.name), span);
    Ok(quote_spanned!(span=> #private::#f(#(#args,)* #devices)))
}
