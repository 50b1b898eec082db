//! The new body of an attributed function: [`fn_body`] picks one output
//! shape from the signature (read by `returns.rs`) and the list, and the
//! rest of this file is those shapes and what they share (entering each
//! scope, leaving on an entry or exit error).

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::Signature;

use super::cx::Cx;
use super::parts::{
    braced, catching, guard, local, outcome, quiet_group, saw, scope_value, seen, spanned,
};
use super::returns::{Ret, ReturnedFuture};
use crate::valid::Scope;

/// The new body of a scoped function. `block` is the original body.
///
/// A scope that fails to enter leaves through `__private::Leave`, which
/// picks by autoref, from the types alone: nothing for an infallible
/// scope, `Err(E::from(e))` for a `Result<_, E>` with `E: From<ScopeError>`,
/// a panic otherwise — so no attribute adds a bound to the return type.
///
/// One output shape each, named by what it emits: [`async_fn`], a
/// [`returned_future`] (async-trait's `Box::pin(async move { .. })`, or an
/// `async` block as the tail of a `-> impl Future` fn), and for sync code
/// [`sync_flat`], [`sync_seen`] (the body as a closure whose `Result` the
/// measuring words see) and [`sync_catching`] (under a `deadline`).
pub(crate) fn fn_body(
    cx: &Cx,
    scopes: &[Scope],
    sig: &Signature,
    block: &Group,
    track_caller: bool,
) -> TokenStream {
    let (outer, block) = (block.span(), quiet_group(block));
    let ret = Ret::of(&sig.output);
    // Parsed only where the type says the function returns a future.
    let parsed = (sig.asyncness.is_none())
        .then(|| ReturnedFuture::output(sig))
        .flatten()
        .and_then(|_| syn::parse2::<syn::Block>(block.to_token_stream()).ok());
    let body = if sig.asyncness.is_some() {
        async_fn(cx, scopes, &ret, &block)
    } else if let Some(future) = parsed.as_ref().and_then(|b| ReturnedFuture::find(sig, b)) {
        returned_future(cx, scopes, &future)
    } else {
        // The body runs as a closure only where that keeps its meaning:
        // not with `impl Trait` in the type (no annotation to give the
        // closure), in an `unsafe fn`, or under `#[track_caller]`.
        let closure_ok = !matches!(sig.safety, syn::Safety::Unsafe(_)) && !track_caller;
        match (closure_ok, catching(scopes), &ret) {
            (
                true,
                Some(deadline),
                Ret {
                    declared: Some(ty), ..
                },
            ) => sync_catching(cx, scopes, &ret, ty, &deadline, &block),
            (
                true,
                _,
                Ret {
                    result: Some(ty), ..
                },
            ) => sync_seen(cx, scopes, &ret, ty, &block),
            _ => sync_flat(cx, scopes, &ret, &block),
        }
    };
    braced(outer, body)
}

/// How the body leaves when a scope's entry failed with
/// `__tch_scope_err`: `return` through `Leave` for a nameable `Result`
/// (a `return` in an async block leaves the block, of the same type),
/// else a panic.
fn leave(ret: &Ret, cx: &Cx) -> TokenStream {
    let (err, private) = (local("__tch_scope_err"), cx.private(Span::call_site()));
    match &ret.result {
        Some(ty) => quote! {
            return {
                use #private::{LeaveInfallible as _, LeavePanicking as _, LeaveWithErr as _};
                (&&&#private::Leave::<#ty, _>::of(&#err)).leave(#err)
            }
        },
        None => quote!(#private::panic_scope_error(#err)),
    }
}

/// `let guard_i = ..;` for each scope. With a nameable `Result`, a failed
/// entry marks the scopes entered before it `Failed` and leaves through
/// [`leave`]; otherwise it panics. `mark`: whether guard `i` is
/// marked later (so bound `mut`).
fn guard_lets(
    cx: &Cx,
    scopes: &[Scope],
    ret: &Ret,
    mark: impl Fn(usize) -> bool,
) -> Vec<TokenStream> {
    let (err, entered) = (local("__tch_scope_err"), local("__tch_scope_entered"));
    let failed = outcome(cx, "Failed");
    let on_err = leave(ret, cx);
    let n = scopes.len();
    scopes
        .iter()
        .enumerate()
        .map(|(i, scope)| {
            let span = scope.span();
            let (g, value, private) = (guard(i), scope_value(cx, scope), cx.private(span));
            if ret.result.is_none() {
                let g = if mark(i) { quote!(mut #g) } else { quote!(#g) };
                return quote_spanned!(span=> let #g = #private::enter_or_panic(#value););
            }
            let g = if mark(i) || i + 1 < n {
                quote!(mut #g)
            } else {
                quote!(#g)
            };
            let outer = saw((0..i).map(guard), &failed);
            quote_spanned! {span=>
                let #g = match #private::enter(#value) {
                    ::core::result::Result::Ok(#entered) => #entered,
                    ::core::result::Result::Err(#err) => { #outer #on_err }
                };
            }
        })
        .collect()
}

/// A function returning `Result` leaves its scopes after the body through
/// `finish_after`, innermost first: after an `Ok`, an exit that fails (a
/// checkpoint that can't be saved) marks the scopes outside it `Failed`
/// and leaves through [`leave`] with its error.
fn finishes(cx: &Cx, scopes: &[Scope], ret: &Ret) -> TokenStream {
    if ret.result.is_none() {
        return TokenStream::new();
    }
    let (private, err) = (cx.private(Span::call_site()), local("__tch_scope_err"));
    let exit = local("__tch_scope_exit");
    let on_err = leave(ret, cx);
    let each = (0..scopes.len()).rev().map(|i| {
        let g = guard(i);
        quote!(let #exit = #private::finish_after(#g, #exit);)
    });
    quote! {
        let #exit = ::core::result::Result::Ok(());
        #(#each)*
        if let ::core::result::Result::Err(#err) = #exit {
            #on_err
        }
    }
}

/// Flat guards, then the body as it was: any way out of a function's body
/// but a panic is its return, and an exit no one marked hears `Completed`.
fn sync_flat(cx: &Cx, scopes: &[Scope], ret: &Ret, block: &Group) -> TokenStream {
    let lets = guard_lets(cx, scopes, ret, |_| false);
    quote!(#(#lets)* #block)
}

/// The body as a closure of the declared `Result` type `ty`, so that every
/// way out of it (`return`, `?`, the tail) passes the scopes' exits: the
/// measuring words see an `Err` as `Failed`, and after an `Ok` an exit
/// that fails becomes the function's `Err` ([`finishes`]).
fn sync_seen(cx: &Cx, scopes: &[Scope], ret: &Ret, ty: &TokenStream, block: &Group) -> TokenStream {
    let lets = guard_lets(cx, scopes, ret, |_| true);
    let private = cx.private(Span::call_site());
    // A closure body can't hold inner attributes (`#![allow(..)]`): they
    // move to the function's body, where they were meant to apply.
    let (inner_attrs, block) = split_inner_attrs(block);
    let value = local("__tch_scope_value");
    let marks = saw((0..scopes.len()).map(guard), &seen(cx, &value));
    let finishes = finishes(cx, scopes, ret);
    quote! {
        #inner_attrs
        #(#lets)*
        match #private::call(move || -> #ty #block) {
            #value => { #marks #finishes #value }
        }
    }
}

/// The body as a closure under the list's `deadline`, which ends it with
/// its `ScopeError` once the deadline has passed (leaving like a failed
/// entry), of the declared type `ty`.
fn sync_catching(
    cx: &Cx,
    scopes: &[Scope],
    ret: &Ret,
    ty: &TokenStream,
    deadline: &Ident,
    block: &Group,
) -> TokenStream {
    let lets = guard_lets(cx, scopes, ret, |_| true);
    let private = cx.private(Span::call_site());
    let (inner_attrs, block) = split_inner_attrs(block);
    let (value, err) = (local("__tch_scope_value"), local("__tch_scope_err"));
    let guards = || (0..scopes.len()).map(guard);
    let failed = saw(guards(), &outcome(cx, "Failed"));
    let marks = saw(guards(), &seen(cx, &value));
    let on_err = leave(ret, cx);
    let finishes = finishes(cx, scopes, ret);
    quote! {
        #inner_attrs
        #(#lets)*
        match match #private::catching(&#deadline, move || -> #ty #block) {
            ::core::result::Result::Ok(#value) => #value,
            ::core::result::Result::Err(#err) => { #failed #on_err }
        } {
            #value => { #marks #finishes #value }
        }
    }
}

/// `async fn`: the body becomes a [`spanned`] future, awaited. The body
/// stays the tail of the async block (so its inner attributes stay legal);
/// a dead `return` of the declared type comes first so that the body's own
/// `return`s coerce to it, as they do in a plain `async fn`
/// (tracing-attributes does the same).
fn async_fn(cx: &Cx, scopes: &[Scope], ret: &Ret, block: &Group) -> TokenStream {
    let hint = ret.declared.as_ref().map(|ty| {
        let r = local("__tch_scope_ret");
        quote! {
            #[allow(
                unknown_lints,
                unreachable_code,
                clippy::diverging_sub_expression,
                clippy::empty_loop,
                clippy::let_unit_value,
                clippy::needless_return,
                clippy::unreachable
            )]
            if false {
                let #r: #ty = loop {};
                return #r;
            }
        }
    });
    let future = spanned(cx, scopes, quote!(async move { #hint #block }));
    awaited(cx, ret, &future)
}

/// `match future.await { Ok(v) => v, Err(e) => leave }`: the value of a
/// [`spanned`] future, or the entry error left through [`leave`].
fn awaited(cx: &Cx, ret: &Ret, future: &TokenStream) -> TokenStream {
    let (fut, value, err) = (
        local("__tch_scope_fut"),
        local("__tch_scope_value"),
        local("__tch_scope_err"),
    );
    let on_err = leave(ret, cx);
    if ret.result.is_none() {
        return quote! {
            let #fut = #future;
            match #fut.await {
                ::core::result::Result::Ok(#value) => #value,
                ::core::result::Result::Err(#err) => #on_err,
            }
        };
    }
    // A `Result`: the future hands over an exit error on completion, taken
    // here at once (same thread, same poll); after an `Ok` it is the `Err`.
    let private = cx.private(Span::call_site());
    let outcome = seen(cx, &value);
    quote! {
        let #fut = #future.exit_errors_to_caller();
        match #fut.await {
            ::core::result::Result::Ok(#value) => match #private::exit_error_after(#outcome) {
                ::core::option::Option::None => #value,
                ::core::option::Option::Some(#err) => #on_err,
            },
            ::core::result::Result::Err(#err) => #on_err,
        }
    }
}

/// The returned future, scoped: the `async` block becomes a [`spanned`]
/// future awaited in a new `async move` block of the same `Output`, so the
/// scopes cover the future's polls (per poll for per-thread state, its
/// whole life for the rest), not its construction.
fn returned_future(cx: &Cx, scopes: &[Scope], f: &ReturnedFuture) -> TokenStream {
    let ReturnedFuture {
        before,
        future,
        boxed,
        output,
    } = f;
    let inner = spanned(cx, scopes, future.to_token_stream());
    let awaited = awaited(cx, output, &inner);
    let wrapped = quote!(async move { #awaited });
    let tail = match boxed {
        Some(pin) => quote!(#pin(#wrapped)),
        None => wrapped,
    };
    quote!(#(#before)* #tail)
}

/// The leading `#![..]` attributes of a block, and the block without them.
fn split_inner_attrs(block: &Group) -> (TokenStream, Group) {
    let tokens: Vec<TokenTree> = block.stream().into_iter().collect();
    let mut end = 0;
    while let [
        TokenTree::Punct(hash),
        TokenTree::Punct(bang),
        TokenTree::Group(g),
        ..,
    ] = &tokens[end..]
        && hash.as_char() == '#'
        && bang.as_char() == '!'
        && g.delimiter() == Delimiter::Bracket
    {
        end += 3;
    }
    let mut rest = Group::new(Delimiter::Brace, tokens[end..].iter().cloned().collect());
    rest.set_span(block.span());
    (tokens[..end].iter().cloned().collect(), rest)
}
