//! The shared checkers: a word written bare, with positional arguments, or
//! with named options. A word's row names one of these as its `check`, or
//! a checker of its own built from the same parts.

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::spanned::Spanned;
use syn::{Expr, Lit};

use crate::ast::{Arg, Args, Item};
use crate::errors::Errors;
use crate::word::{Cx, Kind, Word};

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
    let (name, usage, params) = (word.name, word.usage, word.params);
    let mut out: Values = vec![None; params.len()];
    let list: &[Arg] = item.args.as_ref().map_or(&[], |a| &a.list);
    let mut errors = Errors::default();
    let mut fail = |span: Span, msg: String| errors.push(syn::Error::new(span, msg));
    for (pos, arg) in list.iter().enumerate() {
        let (index, value, span) = match arg {
            Arg::Named(key, value) => {
                let Some(i) = params.iter().position(|p| key == p.name) else {
                    let key = key.to_string();
                    let near = params
                        .iter()
                        .find(|p| strsim::levenshtein(&key, p.name) <= 2)
                        .map(|p| format!(" (did you mean `{}`?)", p.name))
                        .unwrap_or_default();
                    fail(
                        arg_span(arg),
                        format!("`{name}` has no argument `{key}`{near}: write `{usage}`"),
                    );
                    continue;
                };
                (i, value.clone(), key.span())
            }
            Arg::Expr(e) => {
                // A bare flag name: `sync` means `sync = true`.
                let flag = arg.ident().and_then(|id| {
                    params
                        .iter()
                        .position(|p| p.kind == Kind::Flag && id == p.name)
                });
                if let Some(i) = flag {
                    (i, syn::parse_quote_spanned!(e.span()=> true), e.span())
                } else if let Some(i) = params.iter().position(|p| p.position == Some(pos)) {
                    (i, e.clone(), e.span())
                } else {
                    fail(
                        e.span(),
                        format!("unexpected argument to `{name}`: write `{usage}`"),
                    );
                    continue;
                }
            }
        };
        let param = &params[index];
        if out[index].is_some() {
            fail(
                span,
                format!("`{}` is given twice to `{name}`; keep one", param.name),
            );
            continue;
        }
        if param.kind == Kind::Str && !is_str_lit(&value) {
            fail(
                value.span(),
                format!(
                    "`{}` of `{name}` must be a string literal: write `{usage}`",
                    param.name
                ),
            );
            continue;
        }
        out[index] = Some(value);
    }
    for (p, v) in params.iter().zip(&out) {
        if p.required && v.is_none() {
            let span = item.args.as_ref().map_or(item.name.span(), |a| a.span);
            let what = match p.position {
                Some(_) => format!("its `{}` argument", p.name),
                None => format!("`{} = …`", p.name),
            };
            fail(span, format!("`{name}` needs {what}: write `{usage}`"));
        }
    }
    errors.finish()?;
    Ok(out)
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
