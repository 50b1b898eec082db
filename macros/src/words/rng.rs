//! `fork_rng`, `fork_rng(devices = [0, 1])`, `seed(n)`, `seed(n, devices =
//! [..])`: with `devices`, the constructor `<word>_devices` forks only the
//! listed CUDA generators.

use proc_macro2::TokenStream;
use quote::quote_spanned;

use super::forms;
use crate::expand::cx::Cx;
use crate::word::Checked;

pub(crate) fn build(checked: &Checked, cx: &Cx) -> TokenStream {
    let args = forms::positional(checked);
    let Some(devices) = checked.value("devices") else {
        return forms::private_call(checked, cx, &args);
    };
    let span = checked.span;
    let private = cx.private(span);
    let f = syn::Ident::new(&format!("{}_devices", checked.word.name), span);
    quote_spanned!(span=> #private::#f(#(#args,)* #devices))
}
