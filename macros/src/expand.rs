//! Code generation: checked scopes and a body in, tokens out.
//!
//! Every path is absolute (`RT::__private::..`, `::core::..`) so nothing in
//! the caller's scope (a `mod core`, a `Result` alias) can capture it, and
//! every local is `Span::mixed_site()` so the body can't see it.

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::visit::Visit;
use syn::{ReturnType, Signature, Type};

use crate::valid::Scope;
use crate::word::{Awaits, Cx};

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

/// The body with its braces (if it is a block) marked as coming from this
/// expansion, at the same place: rustc's `unused_braces` lint would
/// otherwise flag `{ x }` nested in our block, and it skips expansions.
fn quiet(body: &TokenStream) -> TokenStream {
    as_block(body).map_or_else(
        || body.clone(),
        |block| quiet_group(&block).into_token_stream(),
    )
}

fn as_block(body: &TokenStream) -> Option<Group> {
    let mut tokens = body.clone().into_iter();
    match (tokens.next(), tokens.next()) {
        (Some(TokenTree::Group(g)), None) if g.delimiter() == Delimiter::Brace => Some(g),
        _ => None,
    }
}

fn quiet_group(block: &Group) -> Group {
    let mut quiet = Group::new(Delimiter::Brace, block.stream());
    quiet.set_span(block.span().resolved_at(Span::mixed_site()));
    quiet
}

fn guard(i: usize) -> Ident {
    format_ident!("__tch_scope_guard{}", i, span = Span::mixed_site())
}

fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// The scope value of one item, with its condition.
fn scope_value(cx: &Cx, scope: &Scope) -> TokenStream {
    let value = &scope.value;
    match &scope.cond {
        Some(cond) => {
            let private = cx.private(scope.span);
            quote_spanned!(scope.span=> #private::when(#cond, #value))
        }
        None => value.clone(),
    }
}

/// `Chain(a, Chain(b, End))`: one scope entered in list order.
fn chain<'a>(cx: &Cx, scopes: impl DoubleEndedIterator<Item = &'a Scope>) -> TokenStream {
    let private = cx.private(Span::call_site());
    scopes.rev().fold(quote!(#private::End), |rest, scope| {
        let value = scope_value(cx, scope);
        quote!(#private::Chain(#value, #rest))
    })
}

/// `g.saw(outcome);` for each guard, innermost first.
fn saw(guards: impl DoubleEndedIterator<Item = Ident>, outcome: &TokenStream) -> TokenStream {
    let mut guards = guards.rev().peekable();
    if guards.peek().is_none() {
        return TokenStream::new();
    }
    let o = local("__tch_scope_outcome");
    quote!(let #o = #outcome; #(#guards.saw(#o);)*)
}

/// The outcome of the function body's value `value`, whose type is
/// written (so the autoref below resolves): `Failed` for an `Err`. A
/// block's value is not looked at: its type may be known only from the
/// context (`collect()`), or it may diverge.
fn seen(cx: &Cx, value: &Ident) -> TokenStream {
    let private = cx.private(Span::call_site());
    quote!({
        use #private::{SeenAny as _, SeenResult as _};
        (&#private::Seen(&#value)).outcome()
    })
}

fn outcome(cx: &Cx, name: &str) -> TokenStream {
    let private = cx.private(Span::call_site());
    let name = Ident::new(name, Span::call_site());
    quote!(#private::Outcome::#name)
}

/// The list's `deadline` guard, whose body runs as a closure.
fn catching(scopes: &[Scope]) -> Option<Ident> {
    scopes.iter().position(|s| s.word.catches).map(guard)
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
/// `deadline`, whose body is a closure, they are compile errors).
pub(crate) fn flat(cx: &Cx, scopes: &[Scope], body: &TokenStream) -> TokenStream {
    let lets = scopes.iter().enumerate().map(|(i, scope)| {
        let (g, value, private) = (guard(i), scope_value(cx, scope), cx.private(scope.span));
        quote_spanned!(scope.span=> let #g = #private::enter_or_panic(#value);)
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
pub(crate) fn try_flat(cx: &Cx, scopes: &[Scope], body: &TokenStream) -> TokenStream {
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
    scopes
        .iter()
        .enumerate()
        .rev()
        .fold(inner, |inner, (i, scope)| {
            let (g, value, private) = (guard(i), scope_value(cx, scope), cx.private(scope.span));
            let bind = if marked || i + 1 < n { quote!(mut #g) } else { quote!(#g) };
            let outer = saw((0..i).map(guard), &failed);
            let r = local("__tch_scope_result");
            // The success path leaves through `finish`: an exit that fails
            // (a checkpoint that can't be saved) makes the value its `Err`.
            quote_spanned! {scope.span=>
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
        })
}

/// `Spanned::new(per_poll, span, future)`: per-thread words around every
/// poll, the others (timers, seeds, model modes) once for the whole future.
fn spanned(cx: &Cx, scopes: &[Scope], future: TokenStream) -> TokenStream {
    let per_poll = chain(cx, scopes.iter().filter(|s| s.word.awaits != Awaits::Span));
    let span = chain(cx, scopes.iter().filter(|s| s.word.awaits == Awaits::Span));
    let private = cx.private(Span::call_site());
    quote!(#private::Spanned::new(#per_poll, #span, #future))
}

/// The body becomes a future whose every poll runs inside the per-thread
/// scopes, like tracing's `Instrumented`, and the others span it whole. It behaves as an async block: `?` leaves the
/// body, not the function, and the `scoped!` value is what it evaluates to.
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

/// The new body of a scoped function. `block` is the original body.
///
/// A scope that fails to enter leaves through `__private::Leave`, which
/// picks by autoref, from the types alone: nothing for an infallible
/// scope, `Err(E::from(e))` for a `Result<_, E>` with `E: From<ScopeError>`,
/// a panic otherwise — so no attribute adds a bound to the return type.
pub(crate) fn fn_body(
    cx: &Cx,
    scopes: &[Scope],
    sig: &Signature,
    block: &Group,
    track_caller: bool,
) -> TokenStream {
    let err = local("__tch_scope_err");
    let private = cx.private(Span::call_site());
    let (outer, block) = (block.span(), quiet_group(block));
    // A type that can be named in the body (not `impl Trait`).
    let named = result_type(&sig.output).filter(|ty| !contains_impl(ty));
    let on_err = match named {
        Some(ty) => quote! {
            return {
                use #private::{LeaveInfallible as _, LeavePanicking as _, LeaveWithErr as _};
                (&&&#private::Leave::<#ty, _>::of(&#err)).leave(#err)
            }
        },
        None => quote!(#private::panic_scope_error(#err)),
    };
    if sig.asyncness.is_some() {
        let (fut, ret, value) = (
            local("__tch_scope_fut"),
            local("__tch_scope_ret"),
            local("__tch_scope_value"),
        );
        // The body stays the tail of the async block (so its inner
        // attributes stay legal); a dead `return` of the declared type
        // comes first so that the body's own `return`s coerce to it, as
        // they do in a plain `async fn` (tracing-attributes does the same).
        let ty = match &sig.output {
            ReturnType::Default => Some(quote!(())),
            ReturnType::Type(_, ty) if contains_impl(ty) => None,
            ReturnType::Type(_, ty) => Some(quote!(#ty)),
        };
        let hint = ty.map(|ty| {
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
                    let #ret: #ty = loop {};
                    return #ret;
                }
            }
        });
        let inner = quote!({ #hint #block });
        let spanned = spanned(cx, scopes, quote!(async move #inner));
        return braced(
            outer,
            quote! {
                let #fut = #spanned;
                match #fut.await {
                    ::core::result::Result::Ok(#value) => #value,
                    ::core::result::Result::Err(#err) => #on_err,
                }
            },
        );
    }
    // Words that look at the outcome (`with`, `timed`, the memory scopes)
    // see an `Err` as a failed run, and `deadline` catches the unwind it
    // causes: the body runs as a closure so its value can be seen. Not
    // where a closure would change meaning: `impl Trait` in the type (no
    // annotation to give the closure), `unsafe fn`, `#[track_caller]`.
    let closure_ok = !matches!(sig.safety, syn::Safety::Unsafe(_)) && !track_caller;
    let deadline = catching(scopes).filter(|_| closure_ok);
    let ty = match &sig.output {
        ReturnType::Default => Some(quote!(())),
        ReturnType::Type(_, ty) if contains_impl(ty) => None,
        ReturnType::Type(_, ty) => Some(quote!(#ty)),
    };
    let result = match deadline {
        Some(_) => ty,
        None => named
            .filter(|_| closure_ok && scopes.iter().any(|s| s.word.measures))
            .map(ToTokens::into_token_stream),
    };
    let entered = local("__tch_scope_entered");
    let failed = outcome(cx, "Failed");
    let (n, closure) = (scopes.len(), result.is_some());
    let lets = scopes.iter().enumerate().map(|(i, scope)| {
        let (g, value, private) = (guard(i), scope_value(cx, scope), cx.private(scope.span));
        // Marked by a later scope's failed entry, or after the closure.
        let mark = closure || (named.is_some() && i + 1 < n);
        let g = if mark { quote!(mut #g) } else { quote!(#g) };
        if named.is_some() {
            let outer = saw((0..i).map(guard), &failed);
            quote_spanned! {scope.span=>
                let #g = match #private::enter(#value) {
                    ::core::result::Result::Ok(#entered) => #entered,
                    ::core::result::Result::Err(#err) => { #outer #on_err }
                };
            }
        } else {
            quote_spanned!(scope.span=> let #g = #private::enter_or_panic(#value);)
        }
    });
    let guards = || (0..scopes.len()).map(guard);
    let Some(ty) = result else {
        // Any way out of a function's body but a panic is its return, and
        // an exit that no one marked hears `Completed`.
        return braced(outer, quote!(#(#lets)* #block));
    };
    // A closure body can't hold inner attributes (`#![allow(..)]`): they
    // move to the function's body, where they were meant to apply.
    let (inner_attrs, block) = split_inner_attrs(&block);
    let value = local("__tch_scope_value");
    let marks = saw(guards(), &seen(cx, &value));
    let call = match deadline {
        Some(deadline) => {
            let failed = saw(guards(), &failed);
            quote! {
                match #private::catching(&#deadline, move || -> #ty #block) {
                    ::core::result::Result::Ok(#value) => #value,
                    ::core::result::Result::Err(#err) => { #failed #on_err }
                }
            }
        }
        None => quote!(#private::call(move || -> #ty #block)),
    };
    braced(
        outer,
        quote! {
            #inner_attrs
            #(#lets)*
            match #call {
                #value => { #marks #value }
            }
        },
    )
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

/// `{ tokens }` with the braces of the original body, so the function still
/// ends where the user's `}` is.
fn braced(span: Span, tokens: TokenStream) -> TokenStream {
    let mut group = Group::new(Delimiter::Brace, tokens);
    group.set_span(span);
    group.into_token_stream()
}

/// The return type if its last path segment is `Result` (`Result<T, E>`,
/// `io::Result<T>`, `anyhow::Result<T>`).
fn result_type(output: &ReturnType) -> Option<&Type> {
    let ReturnType::Type(_, ty) = output else {
        return None;
    };
    let mut inner: &Type = ty;
    loop {
        match inner {
            Type::Group(g) => inner = &g.elem,
            Type::Paren(p) => inner = &p.elem,
            Type::Path(p) if p.qself.is_none() => {
                let last = p.path.segments.last()?;
                return (last.ident == "Result").then_some(&**ty);
            }
            _ => return None,
        }
    }
}

/// `impl Trait` can't be written in a `let` type.
fn contains_impl(ty: &Type) -> bool {
    struct Finder(bool);
    impl<'ast> Visit<'ast> for Finder {
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.0 = true;
        }
    }
    let mut finder = Finder(false);
    finder.visit_type(ty);
    finder.0
}
