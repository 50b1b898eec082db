//! Function attributes: `#[no_grad]`, `#[device(0)]`, ... and
//! `#[scope(list)]`.
//!
//! Lenient like tracing-attributes: the signature is parsed, the body kept as
//! opaque tokens. On any mistake the function is re-emitted unchanged next to
//! the errors, so callers get no follow-on errors.

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::quote;
use syn::parse::{ParseStream, Parser};
use syn::{Attribute, LitStr, Signature, Token, Visibility};

use crate::ast::{self, End, Item};
use crate::expand;
use crate::options;
use crate::valid::{self, Errors};
use crate::words::{self, Word};

/// What users write for the list attribute: tch-scope re-exports it as
/// `scope`, since an attribute can't share the `scoped!` macro's name.
const LIST_ATTR: &str = "scope";

/// Which attribute this is.
#[derive(Clone, Copy)]
pub(crate) enum Attr<'a> {
    /// `#[no_grad]`, `#[device(0)]`: one scope word.
    Word(&'a str),
    /// `#[scope(no_grad, device(0))]`: a whole list.
    List,
}

impl Attr<'_> {
    fn word(self) -> Option<&'static Word> {
        match self {
            Attr::Word(name) => words::lookup(name),
            Attr::List => None,
        }
    }
}

/// Expands an attribute; never panics.
pub(crate) fn attribute(attr: Attr, args: TokenStream, item: TokenStream) -> TokenStream {
    attr_tokens(attr, args, item.clone()).unwrap_or_else(|e| {
        let mut out = item;
        out.extend(e.into_compile_error());
        out
    })
}

pub(crate) fn attr_tokens(
    attr: Attr,
    args: TokenStream,
    item: TokenStream,
) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    let items = match attr {
        Attr::Word(name) => word_item(name, args, &mut errors),
        Attr::List => list_items(args, &mut errors),
    };
    let scopes = valid::validate(items, &mut errors);
    let func = match (|input: ParseStream| parse_fn(input, attr)).parse2(item) {
        Ok(func) => func,
        Err(e) => return Err(errors.and(e)),
    };
    errors.finish()?;
    let Func {
        attrs,
        vis,
        default,
        sig,
        block,
    } = func;
    let mut scopes = scopes;
    let fn_name = format!("::{}", sig.ident);
    for scope in &mut scopes {
        if let (valid::Ctor::Options(values), crate::words::Shape::Options(spec)) =
            (&mut scope.ctor, scope.word.shape)
        {
            // A function's measurements are named `module::path::function`.
            options::default_name(values, spec, &fn_name);
        }
    }
    let track_caller = attrs.iter().any(|a| a.path().is_ident("track_caller"));
    let body = expand::fn_body(&quote!(::tch_scope), &scopes, &sig, &block, track_caller);
    Ok(quote!(#(#attrs)* #vis #default #sig #body))
}

/// `#[device(0)]` is the list `device(0)`; the attribute is the word's span.
fn word_item(name: &str, args: TokenStream, errors: &mut Errors) -> Vec<Item> {
    let name = syn::Ident::new(name, Span::call_site());
    let args = match args.clone().into_iter().next() {
        None => None,
        Some(first) => {
            match (|input: ParseStream| ast::parse_args(input, first.span())).parse2(args) {
                Ok(args) => Some(args),
                Err(e) => {
                    errors.push(e);
                    return Vec::new();
                }
            }
        }
    };
    vec![Item {
        name,
        args,
        cond: None,
    }]
}

fn list_items(args: TokenStream, errors: &mut Errors) -> Vec<Item> {
    let parsed = (|input: ParseStream| Ok(ast::parse_list(input, End::Eof, errors))).parse2(args);
    // A parse error (tokens left over) is reported at its token, not lost
    // behind "needs at least one scope word" at the attribute.
    let items = parsed.unwrap_or_else(|e| {
        errors.push(e);
        Vec::new()
    });
    if items.is_empty() && errors.is_empty() {
        errors.push(syn::Error::new(
            Span::call_site(),
            format!("`#[{LIST_ATTR}]` needs at least one scope word: `#[{LIST_ATTR}(no_grad)]`"),
        ));
    }
    items
}

struct Func {
    attrs: Vec<Attribute>,
    vis: Visibility,
    default: Option<Token![default]>,
    sig: Signature,
    block: Group,
}

fn parse_fn(input: ParseStream, attr: Attr) -> syn::Result<Func> {
    // How the attribute and the equivalent `scoped!` list look in messages.
    let (shown, list) = match attr.word() {
        Some(word) if word.params().is_empty() => (word.name.to_owned(), word.usage()),
        Some(word) => (format!("{}(..)", word.name), word.usage()),
        None => (format!("{LIST_ATTR}(..)"), "..".to_owned()),
    };
    let attrs = input.call(Attribute::parse_outer)?;
    let vis: Visibility = input.parse()?;
    let default: Option<Token![default]> = input.parse()?;
    if !at_fn(input) {
        return Err(input.error(format!(
            "`#[{shown}]` goes on a function (`fn`); for a block of code use \
             `scoped!({list} => {{ ... }})`"
        )));
    }
    let sig: Signature = input.parse()?;
    let mut errors = Errors::default();
    if let Some(constness) = sig.constness {
        errors.push(syn::Error::new(
            constness.span,
            format!(
                "`#[{shown}]` can't go on a `const fn`: scopes change thread state at run time, \
                 which a `const fn` cannot do; remove `const` or call a scoped helper"
            ),
        ));
    }
    let block = match input.parse::<TokenTree>()? {
        TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => g,
        other => {
            return Err(errors.and(syn::Error::new(
                other.span(),
                format!(
                    "`#[{shown}]` needs a function body: on a trait method without a default \
                     body, put it on the implementations instead"
                ),
            )));
        }
    };
    errors.finish()?;
    Ok(Func {
        attrs,
        vis,
        default,
        sig,
        block,
    })
}

/// Whether a `fn` comes after the qualifiers `const async unsafe safe extern "abi"`.
fn at_fn(input: ParseStream) -> bool {
    let ahead = input.fork();
    loop {
        if ahead.peek(Token![fn]) {
            return true;
        }
        let qualifier = ahead.peek(Token![const])
            || ahead.peek(Token![async])
            || ahead.peek(Token![unsafe])
            || ahead.peek(Token![extern])
            || ahead.peek(LitStr)
            || ahead.cursor().ident().is_some_and(|(i, _)| i == "safe");
        if !qualifier || ahead.parse::<TokenTree>().is_err() {
            return false;
        }
    }
}
