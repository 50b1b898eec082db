//! The one argument reader, [`read`], and the shared forms a row names as
//! its `check` and `build`: a word written bare, with positional
//! arguments ([`call`], through [`positional`], a view over what `read`
//! read), with one optional flag ([`one_flag`]) or one optional value
//! ([`bare_or_set`]). Every param is read by position where it has one
//! and by name anywhere: `threads(4)` is `threads(n = 4)`.

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::spanned::Spanned;
use syn::{Expr, Ident, Lit};

use super::choice::{add_to_list, choose};
use crate::ast::{Arg, Item};
use crate::errors::Errors;
use crate::expand::cx::Cx;
use crate::word::{Checked, Given, Kind, Param, Word, either};

/// A row's `check` when the reader says all: no checks across arguments.
pub(crate) fn no_check(_: &Checked, _: &mut Errors) {}

/// Reads the arguments into one slot per param of the row, pushing every
/// misuse to `errors` (each on its token) and keeping what was right, so
/// the row's `check` can go on to its cross-field checks and report them
/// in the same list.
pub(crate) fn read(word: &'static Word, item: &Item, errors: &mut Errors) -> Checked {
    let (name, usage, params) = (word.name, word.usage, word.params);
    let span = item.name.span();
    let args_span = item.args.as_ref().map_or(span, |a| a.span);
    let mut out: Vec<Option<Given>> = params.iter().map(|_| None).collect();
    if params.is_empty() && item.args.is_some() {
        errors.push(syn::Error::new(
            args_span,
            format!("`{name}` takes no arguments: write `{name}` without parentheses"),
        ));
    }
    let list: &[Arg] = match params.is_empty() {
        true => &[],
        false => item.args.as_ref().map_or(&[], |a| &a.list),
    };
    // How many positional arguments there are, for messages.
    let written = list
        .iter()
        .filter(|a| matches!(a, Arg::Expr(_)) && bare_param(word, a).is_none())
        .count();
    // Positions count positional arguments only: `autocast(cuda, enabled =
    // b, f16)` puts `f16` second.
    let mut positional = 0;
    // Params written at all, right or wrong: a wrong one is reported once,
    // not again as missing.
    let mut tried = vec![false; params.len()];
    for (index, arg) in list.iter().enumerate() {
        let (i, value, at) = match arg {
            Arg::Named(key, value) => {
                let Some(i) = params.iter().position(|p| key == p.name) else {
                    let (message, meant) = unknown_key(word, key);
                    if let Some(meant) = meant {
                        tried[meant] = true;
                    }
                    errors.push(syn::Error::new(key.span(), message));
                    continue;
                };
                if let Kind::Bare = params[i].kind {
                    tried[i] = true;
                    let alone = format!("write `{key}` alone, without `= …`");
                    errors.push(syn::Error::new(key.span(), alone));
                    continue;
                }
                (i, value.clone(), key.span())
            }
            Arg::Expr(e) => {
                // A flag or bare word written alone: `sync` means `sync = true`.
                if let Some(i) = bare_param(word, arg) {
                    (i, syn::parse_quote_spanned!(e.span()=> true), e.span())
                } else {
                    let slot = params.iter().position(|p| match (p.kind, p.position) {
                        (Kind::List(_), Some(from)) => from <= positional,
                        (_, at) => at == Some(positional),
                    });
                    positional += 1;
                    // `timed(name = "fwd", synced)`: a misspelt flag, not a
                    // second name.
                    let slot = slot.filter(|&i| out[i].is_none() || near_flag(word, arg).is_none());
                    let Some(i) = slot else {
                        let (message, meant) = unexpected(word, arg, written);
                        if let Some(meant) = meant {
                            tried[meant] = true;
                        }
                        errors.push(syn::Error::new(e.span(), message));
                        continue;
                    };
                    (i, e.clone(), e.span())
                }
            }
        };
        tried[i] = true;
        if let Err(e) = store(word, &params[i], &mut out[i], arg, value, at, index) {
            errors.push(e);
        }
    }
    for (p, &tried) in params.iter().zip(&tried) {
        if p.required && !tried {
            let what = match (p.kind, p.position) {
                (Kind::Choice(c), _) => format!("a {} ({})", c.what, c.list()),
                (Kind::List(c), _) => format!("at least one {} ({})", c.what, c.list()),
                (_, Some(_)) => format!("its `{}` argument", p.name),
                (_, None) => format!("`{} = …`", p.name),
            };
            errors.push(syn::Error::new(
                args_span,
                format!("`{name}` needs {what}: write `{usage}`"),
            ));
        }
    }
    Checked {
        word,
        span,
        args_span,
        written: out,
        tried,
    }
}

/// Stores one argument in its param's slot, as the param's kind takes it.
fn store(
    word: &Word,
    param: &Param,
    slot: &mut Option<Given>,
    arg: &Arg,
    value: Expr,
    at: Span,
    index: usize,
) -> syn::Result<()> {
    let (name, usage) = (word.name, word.usage);
    match param.kind {
        // By name, a list is an array of its words: `backends = [math]`.
        Kind::List(choice) => match (arg, &value) {
            (Arg::Named(key, _), Expr::Array(a)) if a.elems.is_empty() => Err(syn::Error::new(
                key.span(),
                format!(
                    "`{name}` needs at least one {} ({}): write `{usage}`",
                    choice.what,
                    choice.list()
                ),
            )),
            (Arg::Named(..), Expr::Array(a)) => {
                let mut each = Errors::default();
                for elem in &a.elems {
                    if let Err(e) = add_to_list(word, choice, slot, elem, index) {
                        each.push(e);
                    }
                }
                each.finish()
            }
            _ => add_to_list(word, choice, slot, &value, index),
        },
        _ if slot.is_some() => Err(syn::Error::new(
            at,
            format!("`{}` is given twice to `{name}`; keep one", param.name),
        )),
        Kind::Str if !is_str_lit(&value) => Err(syn::Error::new(
            value.span(),
            format!(
                "`{}` of `{name}` must be a string literal: write `{usage}`",
                param.name
            ),
        )),
        Kind::Choice(choice) => choose(word, choice, &value).map(|ours| {
            let ours: Expr = syn::parse_quote!(#ours);
            *slot = Some(Given {
                value: ours,
                at,
                index,
            });
        }),
        _ => {
            *slot = Some(Given { value, at, index });
            Ok(())
        }
    }
}

/// The flag or bare word a bare identifier names (`sync`, `from_env`).
fn bare_param(word: &Word, arg: &Arg) -> Option<usize> {
    let id = arg.ident()?;
    word.params
        .iter()
        .position(|p| matches!(p.kind, Kind::Flag | Kind::Bare) && id == p.name)
}

/// The values of the row's positional params that were written, in
/// position order, however they were written (`threads(4)` or
/// `threads(n = 4)`): a view over what [`read`] read.
pub(crate) fn positional(checked: &Checked) -> Vec<&Expr> {
    let mut at: Vec<(usize, &Expr)> = (checked.word.params.iter())
        .zip(&checked.written)
        .filter_map(|(p, g)| Some((p.position?, &g.as_ref()?.value)))
        .collect();
    at.sort_by_key(|&(position, _)| position);
    at.into_iter().map(|(_, value)| value).collect()
}

/// `RT::__private::<name>(args..)` with the word's positional arguments
/// (none for a bare word such as `no_grad`).
pub(crate) fn call(checked: &Checked, cx: &Cx) -> TokenStream {
    private_call(checked, cx, &positional(checked))
}

/// `RT::__private::<word>(args..)`, spanned at the word.
pub(crate) fn private_call(
    checked: &Checked,
    cx: &Cx,
    args: &[impl quote::ToTokens],
) -> TokenStream {
    let span = checked.span;
    let private = cx.private(span);
    let f = Ident::new(checked.word.name, span);
    quote_spanned!(span=> #private::#f(#(#args),*))
}

/// `RT::__private::<word>(flag)` for a word with one optional flag
/// (`deterministic(warn_only)`), `DEFAULT` when it is absent.
pub(crate) fn one_flag<const DEFAULT: bool>(checked: &Checked, cx: &Cx) -> TokenStream {
    let flag = match checked.written.first() {
        Some(Some(given)) => given.value.clone(),
        _ => syn::parse_quote!(#DEFAULT),
    };
    private_call(checked, cx, &[flag])
}

/// `RT::__private::<word>()` written bare, `RT::__private::<word>_set(x)`
/// with its one optional argument (`inference_mode(false)`).
pub(crate) fn bare_or_set(checked: &Checked, cx: &Cx) -> TokenStream {
    let Some(Some(given)) = checked.written.first() else {
        return private_call(checked, cx, &[] as &[Expr]);
    };
    let (span, value) = (checked.span, &given.value);
    let private = cx.private(span);
    let f = Ident::new(&format!("{}_set", checked.word.name), span);
    quote_spanned!(span=> #private::#f(#value))
}

/// `key = …` where the word has no param `key`: the closest param, or
/// PyTorch's longer name (`cache_enabled` for `cache`), else what it takes.
/// The param it names, if it is close to one, comes back too: the user
/// meant that one, which is then not reported missing as well.
fn unknown_key(word: &Word, key: &Ident) -> (String, Option<usize>) {
    let (name, usage, params) = (word.name, word.usage, word.params);
    let key = key.to_string();
    // `sdpa(flash = true)`: a listed word, with a value it cannot take.
    let listed = params.iter().find_map(|p| match p.kind {
        Kind::List(c) => c.find(&key),
        _ => None,
    });
    if let Some(ours) = listed {
        let spelled = match ours == key {
            true => String::new(),
            false => format!(" (`{key}` is spelled `{ours}` here)"),
        };
        let message = format!("write `{ours}` alone, without `= …`{spelled}");
        return (message, None);
    }
    let near = params.iter().position(|p| {
        strsim::levenshtein(&key, p.name) <= 2 || key.starts_with(&format!("{}_", p.name))
    });
    if let Some(i) = near {
        let p = params[i].name;
        return (
            format!("`{name}` has no argument `{key}` (did you mean `{p}`?)"),
            Some(i),
        );
    }
    let names: Vec<String> = params
        .iter()
        .filter(|p| !matches!(p.kind, Kind::List(_)))
        .map(|p| format!("`{}`", p.name))
        .collect();
    let message = match names.is_empty() {
        true => format!("`{name}` has no argument `{key}`: write `{usage}`"),
        false => format!(
            "`{name}` has no argument `{key}`; it takes {}",
            either(names)
        ),
    };
    (message, None)
}

/// A positional argument with no place: a named param written without
/// its value (`cache` for `cache = …`), a misspelt flag, or one too many.
/// The param it was meant for, if any, comes back too, so that it is not
/// reported missing as well.
fn unexpected(word: &Word, arg: &Arg, written: usize) -> (String, Option<usize>) {
    let (name, usage, params) = (word.name, word.usage, word.params);
    let named = arg
        .ident()
        .and_then(|id| params.iter().position(|p| id == p.name))
        .filter(|&i| params[i].position.is_none());
    // Words whose every argument has a place (`grad(enabled)`,
    // `checkpoint` has flags too): the count says it.
    let counted = params
        .iter()
        .all(|p| p.position.is_some() && !matches!(p.kind, Kind::List(_)));
    let near = near_flag(word, arg);
    let message = match (named, near) {
        (Some(i), _) => {
            let p = params[i].name;
            format!("`{p}` of `{name}` needs a value: write `{p} = …`")
        }
        (None, Some(flag)) => format!(
            "`{name}` has no argument `{}` (did you mean `{flag}`?)",
            arg.ident().map(ToString::to_string).unwrap_or_default()
        ),
        (None, None) if counted => format!(
            "`{name}` takes {}, found {written}: write `{usage}`",
            count(params.len())
        ),
        (None, None) => format!("unexpected argument to `{name}`: write `{usage}`"),
    };
    let meant = named.or_else(|| params.iter().position(|p| Some(p.name) == near));
    (message, meant)
}

fn count(n: usize) -> String {
    match n {
        1 => "one argument".to_owned(),
        n => format!("{n} arguments"),
    }
}

/// The flag or bare word a bare identifier misspells, if any.
fn near_flag(word: &Word, arg: &Arg) -> Option<&'static str> {
    let id = arg.ident()?.to_string();
    word.params
        .iter()
        .filter(|p| matches!(p.kind, Kind::Flag | Kind::Bare))
        .find(|p| p.name != id && strsim::levenshtein(&id, p.name) <= 2)
        .map(|p| p.name)
}

fn is_str_lit(e: &Expr) -> bool {
    matches!(e, Expr::Lit(l) if matches!(l.lit, Lit::Str(_)))
}
