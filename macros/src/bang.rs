//! Front end of the function-like macros `scoped!` and `try_scoped!`:
//! `RT ; LIST => BODY` in, an expression out.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::quote;
use syn::parse::{ParseStream, Parser};
use syn::{Expr, Token};

use crate::ast::{self, End};
use crate::body;
use crate::errors::Errors;
use crate::expand::cx::Cx;
use crate::expand::{self, Flavor};
use crate::valid::{self, Scope};

/// `scoped_impl!`/`try_scoped_impl!`: `RT ; LIST => BODY`. Never panics;
/// mistakes become `compile_error!`s.
pub(crate) fn scoped_macro(flavor: Flavor, input: TokenStream) -> TokenStream {
    scoped_tokens(flavor, input).unwrap_or_else(|e| {
        let errors = e.into_compile_error();
        // Diverges, so the caller gets no type errors on top of ours.
        quote!({ #errors loop {} })
    })
}

pub(crate) fn scoped_tokens(flavor: Flavor, input: TokenStream) -> syn::Result<TokenStream> {
    let (rt, rest) = split_rt(input)?;
    let (scopes, body) = (|input: ParseStream| parse_scoped(input, flavor)).parse2(rest)?;
    let cx = Cx::new(rt, None);
    let (expr, mut tokens) = body;
    if leads_with_block(&expr) {
        // `{ a } == { b }` is one expression here, but as the tail of the
        // expansion's block `{ a }` would end a statement: `{ let g = ..;
        // { a } == { b } }` does not parse, and `{ f }(x)` or `{ a } - b`
        // would silently mean something else. Parentheses keep it one
        // expression (they are needed, so no `unused_parens`).
        tokens = quote!((#tokens));
    }
    Ok(match (body::awaits(&expr), flavor) {
        (false, Flavor::Scoped) => expand::flat(&cx, &scopes, &tokens, body::may_hide_await(&expr)),
        (false, Flavor::TryScoped) => {
            expand::try_flat(&cx, &scopes, &tokens, body::may_hide_await(&expr))
        }
        (true, _) => expand::awaiting(&cx, &scopes, &tokens, flavor),
    })
}

/// Whether `expr` is not itself block-like but starts with a block-like
/// expression (`{ a } + b`, `match x {..}.len()`, `if c {..} else {..} as u8`),
/// which in statement position would end at that block.
fn leads_with_block(expr: &Expr) -> bool {
    fn block_like(e: &Expr) -> bool {
        matches!(
            e,
            Expr::Block(_)
                | Expr::If(_)
                | Expr::Match(_)
                | Expr::Loop(_)
                | Expr::While(_)
                | Expr::ForLoop(_)
                | Expr::Unsafe(_)
                | Expr::Const(_)
                | Expr::TryBlock(_)
        )
    }
    fn leftmost(e: &Expr) -> &Expr {
        match e {
            Expr::Binary(b) => leftmost(&b.left),
            Expr::Assign(a) => leftmost(&a.left),
            Expr::Cast(c) => leftmost(&c.expr),
            Expr::MethodCall(m) => leftmost(&m.receiver),
            Expr::Field(f) => leftmost(&f.base),
            Expr::Index(i) => leftmost(&i.expr),
            Expr::Try(t) => leftmost(&t.expr),
            Expr::Await(a) => leftmost(&a.base),
            Expr::Call(c) => leftmost(&c.func),
            Expr::Range(r) => r.start.as_deref().map_or(e, leftmost),
            e => e,
        }
    }
    !block_like(expr) && block_like(leftmost(expr))
}

/// The runtime path is everything before the first top-level `;`.
fn split_rt(input: TokenStream) -> syn::Result<(TokenStream, TokenStream)> {
    let mut iter = input.into_iter();
    let mut rt = TokenStream::new();
    for tt in iter.by_ref() {
        if let TokenTree::Punct(p) = &tt
            && p.as_char() == ';'
            && !rt.is_empty()
        {
            return Ok((rt, iter.collect()));
        }
        rt.extend([tt]);
    }
    Err(syn::Error::new(
        Span::call_site(),
        "this macro is internal to tch-scope: use `tch_scope::scoped!` or `tch_scope::try_scoped!`",
    ))
}

type Body = (Expr, TokenStream);

fn parse_scoped(input: ParseStream, flavor: Flavor) -> syn::Result<(Vec<Scope>, Body)> {
    let name = flavor.name();
    let mut errors = Errors::default();
    let items = ast::parse_list(input, End::Arrow, &mut errors);
    let (empty, last) = (items.is_empty(), items.last().map(|i| i.name.span()));
    let scopes = valid::validate(items, &mut errors);
    let Some(arrow) = input.parse::<Option<Token![=>]>>()? else {
        return Err(errors.or(syn::Error::new(
            last.unwrap_or_else(Span::call_site),
            format!("`{name}` needs `=>` and a body after the scope words: `{name}(no_grad => {{ ... }})`"),
        )));
    };
    if empty && errors.is_empty() {
        errors.push(syn::Error::new(
            arrow.spans[0],
            format!("`{name}` needs at least one scope word before `=>`"),
        ));
    }
    let tokens: TokenStream = input.parse()?;
    let expr = match parse_body(&tokens, arrow.spans[0]) {
        Ok(expr) => expr,
        Err(e) => return Err(errors.and(e)),
    };
    if body::awaits(&expr) {
        for (span, keyword) in body::awaiting_escapes(&expr) {
            let message = if keyword == "?" {
                question_message(name)
            } else {
                escape_message(name, keyword)
            };
            errors.push(syn::Error::new(span, message));
        }
    } else if let Some(word) = scopes.iter().map(Scope::word).find(|w| w.catches) {
        for (span, keyword) in body::escapes(&expr) {
            errors.push(syn::Error::new(
                span,
                catch_message(name, word.name, keyword),
            ));
        }
    }
    errors.finish()?;
    Ok((scopes, (expr, tokens)))
}

fn parse_body(tokens: &TokenStream, arrow: Span) -> syn::Result<Expr> {
    if tokens.is_empty() {
        return Err(syn::Error::new(
            arrow,
            "expected a body after `=>`: a block `{ ... }` or one expression",
        ));
    }
    match syn::parse2(tokens.clone()) {
        // syn parses `let` as an expression for `if let` chains.
        Ok(Expr::Let(e)) => Err(syn::Error::new(
            e.let_token.span,
            "the body after `=>` must be one block `{ ... }` or one expression; \
             put statements in braces: `=> { let ..; }`",
        )),
        Ok(expr) => Ok(expr),
        Err(e) => Err(syn::Error::new(
            e.span(),
            format!("the body after `=>` must be one block `{{ ... }}` or one expression: {e}"),
        )),
    }
}

fn escape_message(name: &str, keyword: &str) -> String {
    format!(
        "`{keyword}` inside a `{name}` body that `.await`s: the body runs as its own future \
         so the scopes can be re-entered on every poll, and `{keyword}` would leave only that \
         future. Put the scope on the async fn instead (`#[no_grad] async fn ...`), or move \
         the `{keyword}` out of the scoped body"
    )
}

/// What to write instead of `?`: the fn-level scope, the `?` before the
/// scope, or the body's future written out, whose `?` is then visibly its.
fn question_message(name: &str) -> String {
    format!(
        "`?` inside a `{name}` body that `.await`s: the body runs as its own future so the \
         scopes can be re-entered on every poll, and `?` would leave only that future, not \
         the function. Put the scope on the async fn instead (`#[no_grad] async fn ...`), \
         move the `?` out of the scoped body (`let x = load().await?;` before it), or make \
         the body an async block of yours and apply `?` to its value: \
         `{name}(no_grad => async {{ ...?; Ok(v) }}.await)?`"
    )
}

fn catch_message(name: &str, word: &str, keyword: &str) -> String {
    format!(
        "`{keyword}` inside a `{name}` body with `{word}`: the body runs as a closure so that \
         `{word}` can end it with its error, and `{keyword}` would leave only that closure. \
         Return a value from the body and act on it after the `{name}`, or put the scope on \
         a function instead (`#[{word}(..)] fn ...`)"
    )
}
