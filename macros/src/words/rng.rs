//! `fork_rng`, `fork_rng(devices = [0, 1])`, `seed(n)`, `seed(n, devices =
//! [..])`: with `devices`, the constructor `<word>_devices` forks only the
//! listed CUDA generators.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::{Expr, ExprLit, ExprUnary, Lit, UnOp};

use super::forms;
use crate::expand::cx::Cx;
use crate::word::Checked;

pub(crate) fn build(checked: &Checked, cx: &Cx) -> TokenStream {
    let span = checked.span;
    let args: Vec<TokenStream> = forms::positional(checked)
        .into_iter()
        .map(|n| typed_literal(n, span).unwrap_or_else(|| n.to_token_stream()))
        .collect();
    let Some(devices) = checked.value("devices") else {
        return forms::private_call(checked, cx, &args);
    };
    let private = cx.private(span);
    let f = syn::Ident::new(&format!("{}_devices", checked.word.name), span);
    quote_spanned!(span=> #private::#f(#(#args,)* #devices))
}

/// `seed`'s `n` when it is an integer literal without a suffix: the
/// literal, untouched, typed `u64` (`i64` when negated) through
/// `identity`. The runtime takes any integer type, so an untyped literal
/// would fall back to `i32`, where a seed such as `0xdead_beef` does not
/// fit. The user's token stays as written, so rustc's range check and
/// clippy's literal lints read the literal the user wrote.
fn typed_literal(n: &Expr, span: Span) -> Option<TokenStream> {
    let ty = match unparenthesized(n) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) if lit.suffix().is_empty() => quote!(u64),
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) => match unparenthesized(expr) {
            Expr::Lit(ExprLit {
                lit: Lit::Int(lit), ..
            }) if lit.suffix().is_empty() => quote!(i64),
            _ => return None,
        },
        _ => return None,
    };
    let span = Span::mixed_site().located_at(span);
    Some(quote_spanned!(span=> ::core::convert::identity::<#ty>(#n)))
}

/// The expression inside parentheses and the invisible group of a
/// `macro_rules!` `$n:expr`.
fn unparenthesized(n: &Expr) -> &Expr {
    match n {
        Expr::Group(g) => unparenthesized(&g.expr),
        Expr::Paren(p) => unparenthesized(&p.expr),
        _ => n,
    }
}
