//! Function attributes: `#[no_grad]`, `#[device(0)]`, ... and
//! `#[scope(list)]`.
//!
//! Lenient like tracing-attributes: the signature is parsed, the body kept as
//! opaque tokens. On any mistake the function is re-emitted unchanged next to
//! the errors, so callers get no follow-on errors.

use proc_macro2::{Delimiter, Group, Spacing, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote};
use syn::parse::{ParseStream, Parser};
use syn::{Attribute, LitStr, Signature, Token, Visibility};

use crate::ast::{self, End, Item};
use crate::errors::Errors;
use crate::expand;
use crate::expand::cx::{Cx, DefaultName};
use crate::valid;
use crate::word::Word;
use crate::words;

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

/// The runtime's path: `::tch_scope`, or what `crate = "…"` says (for a
/// renamed dependency, as tokio and serde do it).
fn runtime_path(written: Option<syn::Path>) -> TokenStream {
    written.map_or_else(|| quote!(::tch_scope), |p| p.into_token_stream())
}

/// Splits `crate = "path"` off the arguments; the rest is returned as is.
fn take_crate(args: TokenStream, errors: &mut Errors) -> (TokenStream, Option<syn::Path>) {
    let original = args.clone();
    let mut segments: Vec<Vec<TokenTree>> = vec![Vec::new()];
    for tt in args {
        match &tt {
            TokenTree::Punct(p) if p.as_char() == ',' => segments.push(Vec::new()),
            _ => segments.last_mut().expect("never empty").push(tt),
        }
    }
    let mut path = None;
    let mut found = false;
    let mut rest: Vec<Vec<TokenTree>> = Vec::new();
    for segment in segments {
        let is_crate = matches!(
            segment.as_slice(),
            [TokenTree::Ident(k), TokenTree::Punct(eq), ..]
                if k == "crate" && eq.as_char() == '=' && eq.spacing() == Spacing::Alone
        );
        if !is_crate {
            rest.push(segment);
            continue;
        }
        found = true;
        match crate_path(&segment) {
            Ok(p) if path.is_some() => errors.push(syn::Error::new_spanned(
                p,
                "`crate` is given twice; keep one",
            )),
            Ok(p) => path = Some(p),
            Err(e) => errors.push(e),
        }
    }
    if !found {
        return (original, None);
    }
    // Drop the empty segment a trailing comma leaves, so `(a, crate = "x",)`
    // is `a`, not `a,`.
    while rest.last().is_some_and(Vec::is_empty) && rest.len() > 1 {
        rest.pop();
    }
    let mut out = TokenStream::new();
    for (i, segment) in rest.into_iter().enumerate() {
        if i > 0 {
            out.extend([TokenTree::Punct(proc_macro2::Punct::new(
                ',',
                Spacing::Alone,
            ))]);
        }
        out.extend(segment);
    }
    (out, path)
}

const CRATE_FORM: &str = "`crate` takes the path of tch-scope as your Cargo.toml names it, \
    in quotes: `crate = \"ts\"` for `ts = { package = \"tch-scope\", .. }`";

/// The `"path"` of `crate = "path"`.
fn crate_path(segment: &[TokenTree]) -> syn::Result<syn::Path> {
    let value: TokenStream = segment[2..].iter().cloned().collect();
    let at = segment.get(2).unwrap_or(&segment[1]).span();
    let lit: LitStr = syn::parse2(value).map_err(|_| syn::Error::new(at, CRATE_FORM))?;
    lit.parse::<syn::Path>().map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!("{:?} is not a path: {CRATE_FORM}", lit.value()),
        )
    })
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
    // Where an empty list is reported: its first token (`crate = ..`
    // alone), or the attribute itself.
    let first = args
        .clone()
        .into_iter()
        .next()
        .map_or_else(Span::call_site, |t| t.span());
    let (args, path) = take_crate(args, &mut errors);
    let items = match attr {
        Attr::Word(name) => word_item(name, args, &mut errors),
        Attr::List => list_items(args, first, &mut errors),
    };
    let bare = items_are_bare(attr, &items);
    let func = (|input: ParseStream| parse_fn(input, attr, bare)).parse2(item);
    let scopes = valid::validate(items, &mut errors);
    let func = match func {
        Ok(func) => func,
        Err(e) => return Err(errors.and(e)),
    };
    errors.finish()?;
    // A function's measurements are named `module::path::function`, a
    // method's `module::path::Type::method`.
    let fn_name = if func.sig.receiver().is_some() {
        DefaultName::Method(func.sig.ident.clone())
    } else {
        let suffix = format!("::{}", func.sig.ident);
        DefaultName::Function(quote!(::core::concat!(::core::module_path!(), #suffix)))
    };
    let cx = Cx::new(runtime_path(path), Some(fn_name));
    let Func {
        attrs,
        vis,
        default,
        sig,
        block,
    } = func;
    let track_caller = attrs.iter().any(|a| a.path().is_ident("track_caller"));
    let body = expand::fn_body(&cx, &scopes, &sig, &block, track_caller);
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

fn list_items(args: TokenStream, first: Span, errors: &mut Errors) -> Vec<Item> {
    let parsed = (|input: ParseStream| Ok(ast::parse_list(input, End::Eof, errors))).parse2(args);
    // A parse error (tokens left over) is reported at its token, not lost
    // behind "needs at least one scope word" at the attribute.
    let items = parsed.unwrap_or_else(|e| {
        errors.push(e);
        Vec::new()
    });
    if items.is_empty() && errors.is_empty() {
        errors.push(syn::Error::new(
            first,
            format!("`#[{LIST_ATTR}]` needs at least one scope word: `#[{LIST_ATTR}(no_grad)]`"),
        ));
    }
    items
}

/// Whether a word attribute was written without arguments (`#[no_grad]`),
/// as messages then show it.
fn items_are_bare(attr: Attr, items: &[Item]) -> bool {
    matches!(attr, Attr::Word(_)) && items.iter().all(|i| i.args.is_none())
}

struct Func {
    attrs: Vec<Attribute>,
    vis: Visibility,
    default: Option<Token![default]>,
    sig: Signature,
    block: Group,
}

fn parse_fn(input: ParseStream, attr: Attr, bare: bool) -> syn::Result<Func> {
    // How the attribute and the equivalent `scoped!` list look in messages.
    let (shown, list) = match attr.word() {
        Some(word) if bare => (word.name.to_owned(), word.usage.to_owned()),
        Some(word) => (format!("{}(..)", word.name), word.usage.to_owned()),
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
