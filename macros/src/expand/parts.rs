//! The pieces every expansion shape is made of: guard and local names,
//! a scope's value, chains of scopes for futures, the marks that tell
//! scopes how the body ended, and the body's braces.

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};

use super::cx::Cx;
use crate::valid::Scope;
use crate::word::Awaits;

/// The body with its braces (if it is a block) marked as coming from this
/// expansion, at the same place: rustc's `unused_braces` lint would
/// otherwise flag `{ x }` nested in our block, and it skips expansions.
pub(super) fn quiet(body: &TokenStream) -> TokenStream {
    as_block(body).map_or_else(
        || body.clone(),
        |block| quiet_group(&block).into_token_stream(),
    )
}

pub(super) fn as_block(body: &TokenStream) -> Option<Group> {
    let mut tokens = body.clone().into_iter();
    match (tokens.next(), tokens.next()) {
        (Some(TokenTree::Group(g)), None) if g.delimiter() == Delimiter::Brace => Some(g),
        _ => None,
    }
}

pub(super) fn quiet_group(block: &Group) -> Group {
    let mut quiet = Group::new(Delimiter::Brace, block.stream());
    quiet.set_span(block.span().resolved_at(Span::mixed_site()));
    quiet
}

/// `{ tokens }` with the braces of the original body, so the function still
/// ends where the user's `}` is.
pub(super) fn braced(span: Span, tokens: TokenStream) -> TokenStream {
    let mut group = Group::new(Delimiter::Brace, tokens);
    group.set_span(span);
    group.into_token_stream()
}

pub(super) fn guard(i: usize) -> Ident {
    format_ident!("__tch_scope_guard{}", i, span = Span::mixed_site())
}

pub(super) fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// The scope value of one item, built by its row, with its condition.
pub(super) fn scope_value(cx: &Cx, scope: &Scope) -> TokenStream {
    let value = (scope.word().build)(&scope.checked, cx);
    let span = scope.span();
    match &scope.cond {
        Some(cond) => {
            let private = cx.private(span);
            quote_spanned!(span=> #private::when(#cond, #value))
        }
        None => value,
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

/// `Spanned::new(each_poll, whole, future)`: per-thread words around every
/// poll, the others (timers, seeds, checkpoints) once for the whole future.
pub(super) fn spanned(cx: &Cx, scopes: &[Scope], future: TokenStream) -> TokenStream {
    let awaiting = |awaits| scopes.iter().filter(move |s| s.word().awaits == awaits);
    let each_poll = chain(cx, awaiting(Awaits::EachPoll));
    let whole = chain(cx, awaiting(Awaits::WholeFuture));
    let private = cx.private(Span::call_site());
    quote!(#private::Spanned::new(#each_poll, #whole, #future))
}

/// `g.saw(outcome);` for each guard, innermost first.
pub(super) fn saw(
    guards: impl DoubleEndedIterator<Item = Ident>,
    outcome: &TokenStream,
) -> TokenStream {
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
pub(super) fn seen(cx: &Cx, value: &Ident) -> TokenStream {
    let private = cx.private(Span::call_site());
    quote!({
        use #private::{SeenAny as _, SeenResult as _};
        (&#private::Seen(&#value)).outcome()
    })
}

pub(super) fn outcome(cx: &Cx, name: &str) -> TokenStream {
    let private = cx.private(Span::call_site());
    let name = Ident::new(name, Span::call_site());
    quote!(#private::Outcome::#name)
}

/// The list's `deadline` guard, whose body runs as a closure.
pub(super) fn catching(scopes: &[Scope]) -> Option<Ident> {
    scopes.iter().position(|s| s.word().catches).map(guard)
}

/// `let watch = watch_hidden_await(..);` before the flat guards of a body
/// that calls a macro which may `.await` unseen (`hides`), when the list
/// has per-thread words: debug builds report such a guard still entered
/// while the thread polls another scoped future. Nothing otherwise.
pub(super) fn watch(cx: &Cx, scopes: &[Scope], name: &str, hides: bool) -> TokenStream {
    let per_poll = scopes
        .iter()
        .filter(|s| s.word().awaits == Awaits::EachPoll);
    let Some(first) = per_poll.clone().next().filter(|_| hides) else {
        return TokenStream::new();
    };
    let words = per_poll
        .map(|s| s.word().name)
        .collect::<Vec<_>>()
        .join("`, `");
    let span = first.span();
    let private = cx.private(span);
    let w = local("__tch_scope_watch");
    quote_spanned!(span=> let #w = #private::watch_hidden_await(#name, #words);)
}
