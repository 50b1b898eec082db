//! The one grammar shared by `scoped!` and every attribute. Parsing knows
//! no words (that is `valid.rs`), and it is lenient: a broken item is
//! reported and skipped up to the next `,`, so one expansion reports every
//! mistake at once.

// list := item ("," item)* ","?
// item := NAME ("(" arg ("," arg)* ")")? ("if" EXPR)?
// arg  := EXPR | IDENT "=" EXPR

use proc_macro2::{Delimiter, Span, TokenTree};
use syn::ext::IdentExt;
use syn::parse::ParseStream;
use syn::{Expr, Ident, Token, parenthesized, token};

use crate::errors::Errors;

pub(crate) struct Item {
    pub(crate) name: Ident,
    pub(crate) args: Option<Args>,
    pub(crate) cond: Option<Expr>,
}

pub(crate) struct Args {
    /// The parentheses, or for `#[device(..)]` the attribute's first token.
    pub(crate) span: Span,
    pub(crate) list: Vec<Arg>,
}

pub(crate) enum Arg {
    Expr(Expr),
    /// `key = value`, for words that take options.
    Named(Ident, Expr),
}

impl Arg {
    /// The argument as a bare identifier (`cpu`, `resume`, `from_env`), if
    /// it is one; `None` for any other expression and for `key = value`.
    pub(crate) fn ident(&self) -> Option<&Ident> {
        match self {
            Arg::Expr(Expr::Path(p)) if p.qself.is_none() && p.attrs.is_empty() => {
                p.path.get_ident()
            }
            _ => None,
        }
    }
}

/// Where a list ends: at `=>` (`scoped!`) or at the end of input (attributes).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Arrow,
    Eof,
}

fn at_end(input: ParseStream, end: End) -> bool {
    input.is_empty() || (end == End::Arrow && input.peek(Token![=>]))
}

/// Parses items until `end`; never fails, mistakes go to `errors`.
pub(crate) fn parse_list(input: ParseStream, end: End, errors: &mut Errors) -> Vec<Item> {
    let mut items = Vec::new();
    while !at_end(input, end) {
        match parse_item(input) {
            Ok(item) => items.push(item),
            Err(e) => {
                errors.push(e);
                skip_to_comma(input, end);
            }
        }
        if at_end(input, end) {
            break;
        }
        if !input.peek(Token![,]) {
            errors.push(unexpected_after_item(input, end));
            skip_to_comma(input, end);
        }
        let _ = input.parse::<Option<Token![,]>>();
    }
    items
}

fn unexpected_after_item(input: ParseStream, end: End) -> syn::Error {
    let brace = input.cursor().group(Delimiter::Brace).is_some();
    match end {
        End::Arrow if brace => input.error(
            "expected `=>` between the scope words and the body: `scoped!(no_grad => { ... })`",
        ),
        End::Arrow => input.error("expected `,` between scope words, or `=>` before the body"),
        End::Eof => input.error("expected `,` between scope words"),
    }
}

/// Skips tokens up to (not including) the next top-level `,` or the end.
fn skip_to_comma(input: ParseStream, end: End) {
    while !at_end(input, end) && !input.peek(Token![,]) {
        let _ = input.parse::<TokenTree>();
    }
}

fn parse_item(input: ParseStream) -> syn::Result<Item> {
    if !input.peek(Ident::peek_any) {
        return Err(input.error("expected a scope word such as `no_grad` or `device(0)`"));
    }
    let name = input.call(Ident::parse_any)?;
    let args = if input.peek(token::Paren) {
        let content;
        let paren = parenthesized!(content in input);
        Some(parse_args(&content, paren.span.join())?)
    } else {
        None
    };
    let cond = if input.peek(Token![if]) {
        input.parse::<Token![if]>()?;
        // Without eager braces, so the `{` of `=> { .. }` is not taken for a
        // struct literal.
        Some(Expr::parse_without_eager_brace(input)?)
    } else {
        None
    };
    Ok(Item { name, args, cond })
}

/// Parses the inside of a word's parentheses.
pub(crate) fn parse_args(input: ParseStream, span: Span) -> syn::Result<Args> {
    let mut list = Vec::new();
    while !input.is_empty() {
        let named = input.peek(Ident)
            && input.peek2(Token![=])
            && !input.peek2(Token![==])
            && !input.peek2(Token![=>]);
        let arg = if named {
            let key: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            Arg::Named(key, input.parse()?)
        } else {
            Arg::Expr(input.parse()?)
        };
        list.push(arg);
        if input.is_empty() {
            break;
        }
        if input.peek(Token![:]) && !input.peek(Token![::]) {
            return Err(input
                .error("unexpected `:`; a device string needs quotes, e.g. `device(\"cuda:0\")`"));
        }
        if !input.peek(Token![,]) {
            return Err(input.error("expected `,` between arguments"));
        }
        input.parse::<Token![,]>()?;
    }
    Ok(Args { span, list })
}
