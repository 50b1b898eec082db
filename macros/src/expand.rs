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

/// `Spanned::new(each_poll, whole, future)`: per-thread words around every
/// poll, the others (timers, seeds, checkpoints) once for the whole future.
fn spanned(cx: &Cx, scopes: &[Scope], future: TokenStream) -> TokenStream {
    let each_poll = chain(
        cx,
        scopes.iter().filter(|s| s.word.awaits == Awaits::EachPoll),
    );
    let whole = chain(
        cx,
        scopes
            .iter()
            .filter(|s| s.word.awaits == Awaits::WholeFuture),
    );
    let private = cx.private(Span::call_site());
    quote!(#private::Spanned::new(#each_poll, #whole, #future))
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

/// What the return type lets the expansion write.
struct Ret {
    /// The declared type where it can be named in a `let` (`()` when none
    /// is written; `None` with `impl Trait` in it).
    declared: Option<TokenStream>,
    /// The same when its last path segment is `Result`.
    result: Option<TokenStream>,
}

impl Ret {
    fn of(output: &ReturnType) -> Ret {
        match output {
            ReturnType::Default => Ret {
                declared: Some(quote!(())),
                result: None,
            },
            ReturnType::Type(_, ty) => Ret::of_type(ty),
        }
    }

    fn of_type(ty: &Type) -> Ret {
        if contains_impl(ty) {
            return Ret {
                declared: None,
                result: None,
            };
        }
        Ret {
            declared: Some(ty.to_token_stream()),
            result: is_result(ty).then(|| ty.to_token_stream()),
        }
    }

    /// How the body leaves when a scope's entry failed with
    /// `__tch_scope_err`: `return` through `Leave` for a nameable `Result`
    /// (a `return` in an async block leaves the block, of the same type),
    /// else a panic.
    fn on_err(&self, cx: &Cx) -> TokenStream {
        let (err, private) = (local("__tch_scope_err"), cx.private(Span::call_site()));
        match &self.result {
            Some(ty) => quote! {
                return {
                    use #private::{LeaveInfallible as _, LeavePanicking as _, LeaveWithErr as _};
                    (&&&#private::Leave::<#ty, _>::of(&#err)).leave(#err)
                }
            },
            None => quote!(#private::panic_scope_error(#err)),
        }
    }
}

/// `let guard_i = ..;` for each scope. With a nameable `Result`, a failed
/// entry marks the scopes entered before it `Failed` and leaves through
/// [`Ret::on_err`]; otherwise it panics. `mark`: whether guard `i` is
/// marked later (so bound `mut`).
fn guard_lets(
    cx: &Cx,
    scopes: &[Scope],
    ret: &Ret,
    mark: impl Fn(usize) -> bool,
) -> Vec<TokenStream> {
    let (err, entered) = (local("__tch_scope_err"), local("__tch_scope_entered"));
    let failed = outcome(cx, "Failed");
    let on_err = ret.on_err(cx);
    let n = scopes.len();
    scopes
        .iter()
        .enumerate()
        .map(|(i, scope)| {
            let (g, value, private) = (guard(i), scope_value(cx, scope), cx.private(scope.span));
            if ret.result.is_none() {
                let g = if mark(i) { quote!(mut #g) } else { quote!(#g) };
                return quote_spanned!(scope.span=> let #g = #private::enter_or_panic(#value););
            }
            let g = if mark(i) || i + 1 < n {
                quote!(mut #g)
            } else {
                quote!(#g)
            };
            let outer = saw((0..i).map(guard), &failed);
            quote_spanned! {scope.span=>
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
/// and leaves through [`Ret::on_err`] with its error.
fn finishes(cx: &Cx, scopes: &[Scope], ret: &Ret) -> TokenStream {
    if ret.result.is_none() {
        return TokenStream::new();
    }
    let (private, err) = (cx.private(Span::call_site()), local("__tch_scope_err"));
    let exit = local("__tch_scope_exit");
    let on_err = ret.on_err(cx);
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
    let on_err = ret.on_err(cx);
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
/// [`spanned`] future, or the entry error left through [`Ret::on_err`].
fn awaited(cx: &Cx, ret: &Ret, future: &TokenStream) -> TokenStream {
    let (fut, value, err) = (
        local("__tch_scope_fut"),
        local("__tch_scope_value"),
        local("__tch_scope_err"),
    );
    let on_err = ret.on_err(cx);
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

/// A function that returns the future it builds: what async-trait makes
/// of an `async fn` (`Box::pin(async move { .. })` as the body's tail, the
/// shape tracing-attributes recognises), or a `-> impl Future<Output = T>`
/// whose tail is an `async` block.
struct ReturnedFuture<'a> {
    /// The statements before the tail, kept as they are.
    before: &'a [syn::Stmt],
    /// The `async` block.
    future: &'a syn::ExprAsync,
    /// `Box::pin` (async-trait) or nothing.
    boxed: Option<&'a syn::Expr>,
    /// The future's `Output` type.
    output: Ret,
}

impl<'a> ReturnedFuture<'a> {
    /// The `Output` of the future the signature returns, if it does.
    fn output(sig: &Signature) -> Option<&Type> {
        match &sig.output {
            ReturnType::Type(_, ty) => future_output(ty),
            ReturnType::Default => None,
        }
    }

    fn find(sig: &Signature, block: &'a syn::Block) -> Option<ReturnedFuture<'a>> {
        let output = Self::output(sig)?;
        let (last, before) = block.stmts.split_last()?;
        let syn::Stmt::Expr(tail, None) = last else {
            return None;
        };
        let (future, boxed) = match tail {
            syn::Expr::Async(a) => (a, None),
            syn::Expr::Call(call) if is_box_pin(&call.func) && call.args.len() == 1 => {
                match &call.args[0] {
                    syn::Expr::Async(a) => (a, Some(&*call.func)),
                    _ => return None,
                }
            }
            _ => return None,
        };
        Some(ReturnedFuture {
            before,
            future,
            boxed,
            output: Ret::of_type(output),
        })
    }
}

/// `Box::pin`, `::std::boxed::Box::pin`, ... (async-trait writes
/// `Box::pin`).
fn is_box_pin(func: &syn::Expr) -> bool {
    let syn::Expr::Path(p) = func else {
        return false;
    };
    let segments: Vec<_> = p
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    segments.ends_with(&["Box".to_owned(), "pin".to_owned()])
}

/// `T` of `impl Future<Output = T>` or `Pin<Box<dyn Future<Output = T> + ..>>`.
fn future_output(ty: &Type) -> Option<&Type> {
    let bounds = match ty {
        Type::ImplTrait(t) => &t.bounds,
        Type::TraitObject(t) => &t.bounds,
        Type::Group(g) => return future_output(&g.elem),
        Type::Paren(p) => return future_output(&p.elem),
        Type::Path(p) => {
            // `Pin<Box<X>>`: look inside the one type argument.
            let last = p.path.segments.last()?;
            if last.ident != "Pin" && last.ident != "Box" {
                return None;
            }
            let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            return args.args.iter().find_map(|a| match a {
                syn::GenericArgument::Type(t) => future_output(t),
                _ => None,
            });
        }
        _ => return None,
    };
    bounds.iter().find_map(|b| {
        let syn::TypeParamBound::Trait(t) = b else {
            return None;
        };
        let last = t.path.segments.last()?;
        if last.ident != "Future" {
            return None;
        }
        let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
            return None;
        };
        args.args.iter().find_map(|a| match a {
            syn::GenericArgument::AssocType(at) if at.ident == "Output" => Some(&at.ty),
            _ => None,
        })
    })
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

/// `{ tokens }` with the braces of the original body, so the function still
/// ends where the user's `}` is.
fn braced(span: Span, tokens: TokenStream) -> TokenStream {
    let mut group = Group::new(Delimiter::Brace, tokens);
    group.set_span(span);
    group.into_token_stream()
}

/// Whether the type's last path segment is `Result` (`Result<T, E>`,
/// `io::Result<T>`, `anyhow::Result<T>`).
fn is_result(ty: &Type) -> bool {
    match ty {
        Type::Group(g) => is_result(&g.elem),
        Type::Paren(p) => is_result(&p.elem),
        Type::Path(p) if p.qself.is_none() => {
            p.path.segments.last().is_some_and(|s| s.ident == "Result")
        }
        _ => false,
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
