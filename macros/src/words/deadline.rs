//! `deadline(duration)`: any expression of type `std::time::Duration`;
//! `deadline(until = t)`: any expression of type `std::time::Instant`. A
//! bare number literal is refused in either place now, since it has no
//! unit (and is no instant).

use proc_macro2::TokenStream;
use quote::quote_spanned;

use super::forms;
use crate::ast::Item;
use crate::word::{Cx, Word};

pub(crate) fn check(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let values = forms::options(word, item)?;
    let duration = forms::value(word, &values, "duration");
    let until = forms::value(word, &values, "until");
    match (duration, until) {
        (Some(d), None) => {
            no_literal(d, false)?;
            Ok(forms::private_call(word, item, cx, &[d]))
        }
        (None, Some(t)) => {
            no_literal(t, true)?;
            let span = item.name.span();
            let private = cx.private(span);
            Ok(quote_spanned!(span=> #private::deadline_until(#t)))
        }
        (Some(d), Some(_)) => Err(syn::Error::new_spanned(
            d,
            "`deadline` takes a duration or `until = instant`, not both: keep one",
        )),
        (None, None) => {
            let span = item.args.as_ref().map_or(item.name.span(), |a| a.span);
            Err(syn::Error::new(
                span,
                "`deadline` needs a duration or an instant: write `deadline(Duration::from_millis(100))` or `deadline(until = t)`",
            ))
        }
    }
}

/// Refuses a literal for the duration, or for the instant of `until`,
/// suggesting what to write.
fn no_literal(e: &syn::Expr, until: bool) -> syn::Result<()> {
    let syn::Expr::Lit(lit) = e else {
        return Ok(());
    };
    let write = |make: &str, n: &str| match until {
        true => format!("`deadline(until = Instant::now() + Duration::{make}({n}))`"),
        false => format!("`deadline(Duration::{make}({n}))`"),
    };
    let takes = match until {
        true => "`deadline(until = …)` takes a `std::time::Instant`",
        false => "`deadline` takes a `std::time::Duration`",
    };
    let msg = match &lit.lit {
        syn::Lit::Int(n) => format!(
            "{takes}, and a bare number has no unit: write {}",
            write("from_millis", n.base10_digits())
        ),
        syn::Lit::Float(x) => format!(
            "{takes}, and a bare number has no unit: write {}",
            write("from_secs_f64", x.base10_digits())
        ),
        _ => format!(
            "{takes}, not a literal: write {}",
            write("from_millis", "100")
        ),
    };
    Err(syn::Error::new_spanned(lit, msg))
}
