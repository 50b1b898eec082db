//! Every positional param of every word of the table is read by its name
//! too, wherever it is read by position: `threads(4)` is `threads(n = 4)`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::parse::Parser;

use super::every_word::words;
use super::lex;
use crate::ast::{self, Arg, End};
use crate::bang::scoped_tokens;
use crate::errors::Errors;
use crate::expand::Flavor;
use crate::word::{Kind, Word};

/// Which param each argument of `list` fills by position, as the reader
/// places it (flags and bare words written alone have no position).
fn places(word: &Word, list: &[Arg]) -> Vec<Option<usize>> {
    let mut positional = 0;
    list.iter()
        .map(|arg| {
            let Arg::Expr(_) = arg else { return None };
            let bare = arg.ident().is_some_and(|id| {
                (word.params.iter())
                    .any(|p| matches!(p.kind, Kind::Flag | Kind::Bare) && id == p.name)
            });
            if bare {
                return None;
            }
            let at = positional;
            positional += 1;
            word.params.iter().position(|p| match (p.kind, p.position) {
                (Kind::List(_), Some(from)) => from <= at,
                (_, position) => position == Some(at),
            })
        })
        .collect()
}

/// `list` with its positional arguments from the `from`th on written by
/// name (a list param's words as one array), the rest as written.
fn by_name(word: &Word, list: &[Arg], from: usize) -> TokenStream {
    let places = places(word, list);
    let mut args: Vec<TokenStream> = Vec::new();
    let mut listed: Option<(usize, Vec<&syn::Expr>)> = None;
    let mut positional = 0;
    for (arg, place) in list.iter().zip(places) {
        let name_it = place.filter(|_| {
            positional += 1;
            positional > from
        });
        match (arg, name_it) {
            (Arg::Expr(e), Some(i)) if matches!(word.params[i].kind, Kind::List(_)) => {
                listed.get_or_insert((i, Vec::new())).1.push(e);
            }
            (Arg::Expr(e), Some(i)) => {
                let key = syn::Ident::new(word.params[i].name, proc_macro2::Span::call_site());
                args.push(quote!(#key = #e));
            }
            (Arg::Expr(e), None) => args.push(quote!(#e)),
            (Arg::Named(key, value), _) => args.push(quote!(#key = #value)),
        }
    }
    if let Some((i, words)) = listed {
        let key = syn::Ident::new(word.params[i].name, proc_macro2::Span::call_site());
        args.push(quote!(#key = [#(#words),*]));
    }
    let name = syn::Ident::new(word.name, proc_macro2::Span::call_site());
    quote!(#name(#(#args),*))
}

fn expand(list: TokenStream) -> String {
    let input = quote!(::rt ; #list => ());
    match scoped_tokens(Flavor::Scoped, input) {
        Ok(tokens) => tokens.to_string(),
        Err(e) => panic!("`{list}` does not expand: {e}"),
    }
}

/// Each row's examples with their positional arguments written by name,
/// from each position on (`checkpoint(vs, path = p)`, `checkpoint(vs = v,
/// path = p)`), expand as written; every positional param of every word
/// is reached so.
#[test]
fn every_positional_param_is_read_by_its_name() {
    let mut reached: Vec<(&str, &str)> = Vec::new();
    for w in words() {
        for example in w.examples {
            let list = example.split(" if ").next().unwrap_or(example);
            let mut errors = Errors::default();
            let items = (|input: syn::parse::ParseStream| {
                Ok(ast::parse_list(input, End::Eof, &mut errors))
            })
            .parse2(lex(list))
            .expect("parses");
            let [item] = items.as_slice() else {
                panic!("`{list}`: one item")
            };
            let args: &[Arg] = item.args.as_ref().map_or(&[], |a| &a.list);
            let places = places(w, args);
            let written = places.iter().flatten().count();
            let expected = expand(lex(list));
            for from in 0..written {
                let named = by_name(w, args, from);
                assert_eq!(
                    expand(named.clone()),
                    expected,
                    "`{named}` against `{list}`"
                );
            }
            for i in places.into_iter().flatten() {
                reached.push((w.name, w.params[i].name));
            }
        }
        for p in w.params.iter().filter(|p| p.position.is_some()) {
            assert!(
                reached.contains(&(w.name, p.name)),
                "no example of `{}` writes its `{}` by position",
                w.name,
                p.name
            );
        }
    }
}
