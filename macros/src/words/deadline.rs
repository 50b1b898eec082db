//! `deadline(duration)`: any expression of type `std::time::Duration`;
//! `deadline(until = t)`: any expression of type `std::time::Instant`. A
//! bare number literal is refused in either place now, since it has no
//! unit (and is no instant).

use proc_macro2::TokenStream;
use quote::quote_spanned;

use super::forms;
use crate::errors::Errors;
use crate::expand::cx::Cx;
use crate::word::Checked;

/// A literal for either, both, or neither (unless one was tried and is
/// already reported): each reported.
pub(crate) fn check(checked: &Checked, errors: &mut Errors) {
    let duration = checked.value("duration");
    let until = checked.value("until");
    for (value, until) in [(duration, false), (until, true)] {
        if let Some(e) = value.and_then(|v| no_literal(v, until).err()) {
            errors.push(e);
        }
    }
    match (duration, until) {
        (Some(d), Some(_)) => errors.push(syn::Error::new_spanned(
            d,
            "`deadline` takes a duration or `until = instant`, not both: keep one",
        )),
        (None, None) if !checked.tried("duration") && !checked.tried("until") => {
            errors.push(syn::Error::new(
                checked.args_span,
                "`deadline` needs a duration or an instant: \
             write `deadline(Duration::from_millis(100))` or `deadline(until = t)`",
            ));
        }
        _ => {}
    }
}

/// `RT::__private::deadline(d)` or `RT::__private::deadline_until(t)`.
pub(crate) fn build(checked: &Checked, cx: &Cx) -> TokenStream {
    if let Some(d) = checked.value("duration") {
        return forms::private_call(checked, cx, &[d]);
    }
    let t = checked
        .value("until")
        .expect("`check` reports neither given");
    let span = checked.span;
    let private = cx.private(span);
    quote_spanned!(span=> #private::deadline_until(#t))
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
