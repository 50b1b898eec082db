//! `scoped!` and `try_scoped!`: checked scopes and a body in, one block
//! expression out. Flat `let` guards where the body does not `.await`
//! ([`flat`], [`try_flat`]), a future re-entered on every poll where it
//! does ([`awaiting`]).

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};

use super::cx::Cx;
use super::parts::{
    as_block, catching, guard, local, outcome, quiet, quiet_group, saw, scope_value, spanned, watch,
};
use crate::valid::Scope;

/// Which function-like macro is expanding.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// `scoped!`: panics if a scope can't be entered.
    Scoped,
    /// `try_scoped!`: evaluates to `Result<T, ScopeError>`.
    TryScoped,
}

impl Flavor {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Flavor::Scoped => "scoped!",
            Flavor::TryScoped => "try_scoped!",
        }
    }
}

/// The body, or with a `deadline` in the list the body as a closure under
/// `catching`, whose error goes to `on_err` (`__tch_scope_err`).
fn body_value(
    cx: &Cx,
    scopes: &[Scope],
    body: &TokenStream,
    ok: impl Fn(&TokenStream) -> TokenStream,
    on_err: &TokenStream,
) -> TokenStream {
    let Some(deadline) = catching(scopes) else {
        return ok(body);
    };
    let (value, err) = (local("__tch_scope_value"), local("__tch_scope_err"));
    let private = cx.private(Span::call_site());
    let ok = ok(&quote!(#value));
    quote! {
        match #private::catching(&#deadline, || #body) {
            ::core::result::Result::Ok(#value) => #ok,
            ::core::result::Result::Err(#err) => #on_err,
        }
    }
}

/// Flat guards in a block: no closure, so `?`, `return`, `break` and
/// `continue` in the body act on the enclosing fn or loop (but with a
/// `deadline`, whose body is a closure, they are compile errors). `hides`:
/// the body calls a macro that may await unseen (see [`watch`]).
pub(crate) fn flat(cx: &Cx, scopes: &[Scope], body: &TokenStream, hides: bool) -> TokenStream {
    let watch = watch(cx, scopes, Flavor::Scoped.name(), hides);
    let lets = scopes.iter().enumerate().map(|(i, scope)| {
        let span = scope.span();
        let (g, value, private) = (guard(i), scope_value(cx, scope), cx.private(span));
        quote_spanned!(span=> let #g = #private::enter_or_panic(#value);)
    });
    let private = cx.private(Span::call_site());
    let err = local("__tch_scope_err");
    // A panic needs no mark: the exits hear `Panicked`.
    let value = body_value(
        cx,
        scopes,
        &quiet(body),
        Clone::clone,
        &quote!(#private::panic_scope_error(#err)),
    );
    // Leaving on the success path: an exit that fails (a checkpoint that
    // can't be saved) panics with its error, innermost scope first.
    let v = local("__tch_scope_value");
    let finishes = (0..scopes.len()).rev().map(|i| {
        let g = guard(i);
        quote!(#private::finish_or_panic(#g);)
    });
    quote!({
        #watch
        #(#lets)*
        // A match arm, where a body that diverges (`panic!`, `break`) is
        // no clippy `diverging_sub_expression`.
        let #v = match () {
            () => #value,
        };
        #[allow(unreachable_code)]
        {
            #(#finishes)*
        }
        #v
    })
}

/// Nested matches rather than a labeled block: an unlabeled `break` in the
/// body (for a loop around the macro) would be E0695 in a labeled block.
/// The scopes entered before one that fails, or before a `deadline` that
/// ends the body, hear `Failed`: the block's value is that `Err`.
pub(crate) fn try_flat(cx: &Cx, scopes: &[Scope], body: &TokenStream, hides: bool) -> TokenStream {
    let watch = watch(cx, scopes, Flavor::TryScoped.name(), hides);
    let err = local("__tch_scope_err");
    let failed = outcome(cx, "Failed");
    let marked = catching(scopes).is_some();
    let all = saw((0..scopes.len()).map(guard), &failed);
    let inner = body_value(
        cx,
        scopes,
        &quiet(body),
        |v| quote!(::core::result::Result::Ok(#v)),
        &quote!({ #all ::core::result::Result::Err(#err) }),
    );
    let n = scopes.len();
    let nested = scopes
        .iter()
        .enumerate()
        .rev()
        .fold(inner, |inner, (i, scope)| {
            let span = scope.span();
            let (g, value, private) = (guard(i), scope_value(cx, scope), cx.private(span));
            let bind = if marked || i + 1 < n { quote!(mut #g) } else { quote!(#g) };
            let outer = saw((0..i).map(guard), &failed);
            let r = local("__tch_scope_result");
            // The success path leaves through `finish`: an exit that fails
            // (a checkpoint that can't be saved) makes the value its `Err`.
            quote_spanned! {span=>
                match #private::try_enter(#value) {
                    ::core::result::Result::Err(#err) => { #outer ::core::result::Result::Err(#err) }
                    ::core::result::Result::Ok(#bind) => {
                        let #r = #inner;
                        #[allow(unreachable_code)]
                        let #r = #private::finish(#g, #r);
                        #r
                    }
                }
            }
        });
    if watch.is_empty() {
        nested
    } else {
        quote!({ #watch #nested })
    }
}

/// The body becomes a future whose every poll runs inside the per-thread
/// scopes, like tracing's `Instrumented`, and the others span it whole.
/// It behaves as an async block: `?` leaves the body, not the function,
/// and the `scoped!` value is what it evaluates to.
pub(crate) fn awaiting(
    cx: &Cx,
    scopes: &[Scope],
    body: &TokenStream,
    flavor: Flavor,
) -> TokenStream {
    // A block body is the async block's own block.
    let body = as_block(body).map_or_else(
        || quote!({ #body }),
        |block| quiet_group(&block).into_token_stream(),
    );
    let fut = spanned(cx, scopes, quote!(async #body));
    let fut = quote!(#fut.await);
    let private = cx.private(Span::call_site());
    match flavor {
        Flavor::TryScoped => quote!({ #private::scope_result(#fut) }),
        Flavor::Scoped => {
            let (value, err) = (local("__tch_scope_value"), local("__tch_scope_err"));
            quote!({
                match #fut {
                    ::core::result::Result::Ok(#value) => #value,
                    ::core::result::Result::Err(#err) => #private::panic_scope_error(#err),
                }
            })
        }
    }
}
