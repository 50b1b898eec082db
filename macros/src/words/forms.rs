//! The shared checkers: a word written bare, with positional arguments, or
//! with named options. A word's row names one of these as its `check`, or
//! a checker of its own built from the same parts.

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::spanned::Spanned;
use syn::{Expr, Ident, Lit};

use crate::ast::{Arg, Args, Item};
use crate::errors::Errors;
use crate::word::{Choice, Cx, Kind, Word, either};

/// `RT::__private::<name>(args..)` with the word's positional arguments
/// (none for a bare word such as `no_grad`).
pub(crate) fn call(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let args = positional(word, item)?;
    Ok(private_call(word, item, cx, &args))
}

/// `RT::__private::<word>(args..)`, spanned at the word.
pub(crate) fn private_call(
    word: &Word,
    item: &Item,
    cx: &Cx,
    args: &[impl quote::ToTokens],
) -> TokenStream {
    let span = item.name.span();
    let private = cx.private(span);
    let f = syn::Ident::new(word.name, span);
    quote_spanned!(span=> #private::#f(#(#args),*))
}

/// Checks the argument count; returns exactly `word.params.len()` exprs.
pub(crate) fn positional(word: &Word, item: &Item) -> syn::Result<Vec<Expr>> {
    let want = word.params.len();
    let (name, usage) = (word.name, word.usage);
    let Some(Args { span, list }) = &item.args else {
        return match want {
            0 => Ok(Vec::new()),
            _ => Err(syn::Error::new(
                item.name.span(),
                format!("`{name}` needs {}: write `{usage}`", count(want)),
            )),
        };
    };
    if want == 0 {
        return Err(syn::Error::new(
            *span,
            format!("`{name}` takes no arguments: write `{name}` without parentheses"),
        ));
    }
    let mut exprs = Vec::new();
    for (i, arg) in list.iter().enumerate() {
        match arg {
            Arg::Named(key, _) => {
                return Err(syn::Error::new(
                    key.span(),
                    format!("`{name}` takes no named arguments: write `{usage}`"),
                ));
            }
            Arg::Expr(_) if i == want => {
                return Err(syn::Error::new(
                    arg_span(arg),
                    format!(
                        "`{name}` takes {}, found {}: write `{usage}`",
                        count(want),
                        list.len()
                    ),
                ));
            }
            Arg::Expr(e) => exprs.push(e.clone()),
        }
    }
    if exprs.len() < want {
        return Err(syn::Error::new(
            *span,
            format!(
                "`{name}` needs {}, found {}: write `{usage}`",
                count(want),
                exprs.len()
            ),
        ));
    }
    Ok(exprs)
}

pub(crate) fn arg_span(arg: &Arg) -> Span {
    match arg {
        Arg::Expr(e) => e.span(),
        Arg::Named(key, _) => key.span(),
    }
}

fn count(n: usize) -> String {
    match n {
        1 => "one argument".to_owned(),
        n => format!("{n} arguments"),
    }
}

/// The value written for each of a word's params, in param order.
pub(crate) type Values = Vec<Option<Expr>>;

/// Named, flag and positional options (`timed("fwd", sync)`,
/// `gpu_memory_scope(device = 0, empty_cache = false)`): one value slot per
/// param of the row, every misuse reported on its token.
pub(crate) fn options(word: &Word, item: &Item) -> syn::Result<Values> {
    let mut errors = Errors::default();
    let written = read(word, item, &mut errors);
    errors.finish()?;
    Ok(written.into_iter().map(|g| g.map(|g| g.value)).collect())
}

/// One param's argument as written.
pub(crate) struct Given {
    /// The expression; `true` for a flag or a bare word written alone; a
    /// choice's word in our spelling; a list's words as an array of them.
    pub(crate) value: Expr,
    /// The token that names it (its key or bare word), else its value:
    /// where a cross-field mistake points.
    pub(crate) at: Span,
    /// Its place in the argument list, for words whose expansion keeps
    /// the written order (`autocast`'s builder calls, evaluated in order).
    pub(crate) index: usize,
}

/// What was written for each of a word's params, in param order.
pub(crate) type Written = Vec<Option<Given>>;

/// Reads the arguments into one slot per param of the row, pushing every
/// misuse to `errors` (each on its token) and keeping what was right, so a
/// word's checker can go on to its cross-field checks and report them in
/// the same list.
pub(crate) fn read(word: &Word, item: &Item, errors: &mut Errors) -> Written {
    let (name, usage, params) = (word.name, word.usage, word.params);
    let mut out: Written = params.iter().map(|_| None).collect();
    let list: &[Arg] = item.args.as_ref().map_or(&[], |a| &a.list);
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
                    errors.push(syn::Error::new(key.span(), unknown_key(word, key)));
                    continue;
                };
                let alone = match params[i].kind {
                    Kind::Bare => Some(format!("write `{key}` alone, without `= …`")),
                    Kind::List(c) => Some(format!(
                        "`{name}` takes its {}s bare, one by one: write `{usage}`",
                        c.what
                    )),
                    _ => None,
                };
                if let Some(alone) = alone {
                    tried[i] = true;
                    errors.push(syn::Error::new(key.span(), alone));
                    continue;
                }
                (i, value.clone(), key.span())
            }
            Arg::Expr(e) => {
                // A flag or bare word written alone: `sync` means `sync = true`.
                let bare = arg.ident().and_then(|id| {
                    params
                        .iter()
                        .position(|p| matches!(p.kind, Kind::Flag | Kind::Bare) && id == p.name)
                });
                if let Some(i) = bare {
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
                        let (message, named) = unexpected(word, arg);
                        if let Some(named) = named {
                            tried[named] = true;
                        }
                        errors.push(syn::Error::new(e.span(), message));
                        continue;
                    };
                    (i, e.clone(), e.span())
                }
            }
        };
        let param = &params[i];
        tried[i] = true;
        let slot = &mut out[i];
        let checked = match param.kind {
            Kind::List(choice) => add_to_list(word, choice, slot, &value, index),
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
        };
        if let Err(e) = checked {
            errors.push(e);
        }
    }
    for (p, tried) in params.iter().zip(tried) {
        if p.required && !tried {
            let span = item.args.as_ref().map_or(item.name.span(), |a| a.span);
            let what = match (p.kind, p.position) {
                (Kind::Choice(c), _) => format!("a {} ({})", c.what, c.list()),
                (Kind::List(c), _) => format!("at least one {} ({})", c.what, c.list()),
                (_, Some(_)) => format!("its `{}` argument", p.name),
                (_, None) => format!("`{} = …`", p.name),
            };
            errors.push(syn::Error::new(
                span,
                format!("`{name}` needs {what}: write `{usage}`"),
            ));
        }
    }
    out
}

/// The argument written for `param`, if any.
pub(crate) fn given<'a>(word: &Word, written: &'a Written, param: &str) -> Option<&'a Given> {
    let i = word.params.iter().position(|p| p.name == param)?;
    written.get(i)?.as_ref()
}

/// The word a `Choice` param's value is, or each word of a `List`'s, as
/// `read` left them (our spelling, at the written token).
pub(crate) fn words(value: &Expr) -> Vec<Ident> {
    match value {
        Expr::Array(a) => a.elems.iter().flat_map(words).collect(),
        Expr::Path(p) => p.path.get_ident().cloned().into_iter().collect(),
        _ => Vec::new(),
    }
}

/// `key = …` where the word has no param `key`: the closest param, or
/// PyTorch's longer name (`cache_enabled` for `cache`), else what it takes.
fn unknown_key(word: &Word, key: &Ident) -> String {
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
        return format!("write `{ours}` alone, without `= …`{spelled}");
    }
    let near = params.iter().find(|p| {
        strsim::levenshtein(&key, p.name) <= 2 || key.starts_with(&format!("{}_", p.name))
    });
    if let Some(p) = near {
        return format!(
            "`{name}` has no argument `{key}` (did you mean `{}`?)",
            p.name
        );
    }
    let names: Vec<String> = params
        .iter()
        .filter(|p| !matches!(p.kind, Kind::List(_)))
        .map(|p| format!("`{}`", p.name))
        .collect();
    match names.is_empty() {
        true => format!("`{name}` has no argument `{key}`: write `{usage}`"),
        false => format!(
            "`{name}` has no argument `{key}`; it takes {}",
            either(names)
        ),
    }
}

/// A positional argument with no place: a named param written without
/// its value (`cache` for `cache = …`, whose index comes back so it is
/// not reported missing too), or one too many.
fn unexpected(word: &Word, arg: &Arg) -> (String, Option<usize>) {
    let (name, usage) = (word.name, word.usage);
    let named = arg
        .ident()
        .and_then(|id| word.params.iter().position(|p| id == p.name));
    let message = match (named, near_flag(word, arg)) {
        (Some(i), _) => {
            let p = word.params[i].name;
            format!("`{p}` of `{name}` needs a value: write `{p} = …`")
        }
        (None, Some(flag)) => format!(
            "`{name}` has no argument `{}` (did you mean `{flag}`?)",
            arg.ident().map(ToString::to_string).unwrap_or_default()
        ),
        (None, None) => format!("unexpected argument to `{name}`: write `{usage}`"),
    };
    (message, named)
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

/// `value` as one of `choice`'s words: our spelling, at the written token.
fn choose(word: &Word, choice: &Choice, value: &Expr) -> syn::Result<Ident> {
    let name = word.name;
    let what = choice.what;
    // Over the whole value (`Kind::Half`, `1 + 1`), not its first token.
    let fixed = || {
        syn::Error::new_spanned(
            value,
            format!(
                "the {what} of `{name}` is a word, fixed at compile time: write {}",
                choice.list()
            ),
        )
    };
    // What was written, the word to look up, whether it may stand as
    // written, and its one token (`None`: point at the whole value). A
    // path (tch's `Kind::Half`) is looked up by its last segment, so it is
    // told our word, but never taken.
    let (written, word_part, exact, span) = match value {
        Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => {
            let Some(last) = p.path.segments.last() else {
                return Err(fixed());
            };
            let segments: Vec<String> = p
                .path
                .segments
                .iter()
                .map(|s| s.ident.to_string())
                .collect();
            let lead = if p.path.leading_colon.is_some() {
                "::"
            } else {
                ""
            };
            let written = format!("{lead}{}", segments.join("::"));
            match p.path.get_ident() {
                Some(id) => (written, id.to_string(), true, Some(id.span())),
                None => (written, last.ident.to_string(), false, None),
            }
        }
        Expr::Lit(l) => match &l.lit {
            Lit::Str(s) => (s.value(), s.value(), choice.strings, Some(s.span())),
            _ => return Err(fixed()),
        },
        _ => return Err(fixed()),
    };
    let message = match choice.find(&word_part) {
        Some(ours) if ours == written && exact => {
            let span = span.unwrap_or_else(|| value.span());
            return Ok(Ident::new(ours, span));
        }
        Some(ours) if ours == written => format!("write `{ours}` without quotes"),
        Some(ours) => format!("`{written}` is spelled `{ours}` here"),
        None if written != word_part => return Err(fixed()),
        None => format!(
            "`{written}` is not a {what} of `{name}`: write {}",
            choice.list()
        ),
    };
    Err(match span {
        Some(span) => syn::Error::new(span, message),
        None => syn::Error::new_spanned(value, message),
    })
}

/// Adds one word to a `List` param's array, refusing any other value and
/// a word listed twice.
fn add_to_list(
    word: &Word,
    choice: &Choice,
    slot: &mut Option<Given>,
    value: &Expr,
    index: usize,
) -> syn::Result<()> {
    let ours = choose(word, choice, value)?;
    let Some(given) = slot else {
        let at = ours.span();
        *slot = Some(Given {
            value: syn::parse_quote!([#ours]),
            at,
            index,
        });
        return Ok(());
    };
    if words(&given.value).contains(&ours) {
        return Err(syn::Error::new(
            ours.span(),
            format!("`{ours}` is listed twice in `{}`; keep one", word.name),
        ));
    }
    if let Expr::Array(a) = &mut given.value {
        a.elems.push(syn::parse_quote!(#ours));
    }
    Ok(())
}

/// The value written for `param`, if any.
pub(crate) fn value<'a>(word: &Word, values: &'a Values, param: &str) -> Option<&'a Expr> {
    let i = word.params.iter().position(|p| p.name == param)?;
    values.get(i)?.as_ref()
}

/// `RT::__private::<word>(flag)` for a word with one optional flag
/// (`deterministic(warn_only)`), `default` when it is absent.
pub(crate) fn one_flag<const DEFAULT: bool>(
    word: &Word,
    item: &Item,
    cx: &Cx,
) -> syn::Result<TokenStream> {
    let values = options(word, item)?;
    let flag = values
        .into_iter()
        .next()
        .flatten()
        .unwrap_or_else(|| syn::parse_quote!(#DEFAULT));
    Ok(private_call(word, item, cx, &[flag]))
}

/// `RT::__private::<word>()` written bare, `RT::__private::<word>_set(x)`
/// with its one optional argument (`inference_mode(false)`).
pub(crate) fn bare_or_set(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let values = options(word, item)?;
    let Some(value) = values.into_iter().next().flatten() else {
        return Ok(private_call(word, item, cx, &[] as &[Expr]));
    };
    let span = item.name.span();
    let private = cx.private(span);
    let f = syn::Ident::new(&format!("{}_set", word.name), span);
    Ok(quote_spanned!(span=> #private::#f(#value)))
}

fn is_str_lit(e: &Expr) -> bool {
    matches!(e, Expr::Lit(l) if matches!(l.lit, Lit::Str(_)))
}
