//! `deadline(duration)`: any expression of type `std::time::Duration`; a
//! bare literal is refused now, since it has no unit.

use proc_macro2::TokenStream;

use super::forms;
use crate::ast::Item;
use crate::word::{Cx, Word};

pub(crate) fn check(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let expr = forms::positional(word, item)?.remove(0);
    if let syn::Expr::Lit(lit) = &expr {
        let write = match &lit.lit {
            syn::Lit::Int(n) => format!("`deadline(Duration::from_millis({}))`", n.base10_digits()),
            syn::Lit::Float(x) => {
                format!("`deadline(Duration::from_secs_f64({}))`", x.base10_digits())
            }
            _ => "`deadline(Duration::from_millis(100))`".to_owned(),
        };
        return Err(syn::Error::new_spanned(
            lit,
            format!(
                "`deadline` takes a `std::time::Duration`, and a bare number has no unit: write {write}"
            ),
        ));
    }
    Ok(forms::private_call(word, item, cx, &[expr]))
}
