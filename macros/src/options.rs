//! Words with optional and named arguments: `timed("fwd", sync)`,
//! `gpu_memory_scope(device = 0, empty_cache = false)`.
//!
//! A word describes its arguments once in a [`Spec`]; validation turns the
//! written arguments into one value slot per argument, in spec order, and
//! reports every misuse on its token.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Expr, Lit};

use crate::ast::{Arg, Item};
use crate::valid::Errors;

/// What one argument accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A string literal (names become `&'static str` statics).
    Str,
    /// Any expression.
    Expr,
    /// A `bool`: written bare (`sync`) for `true`, or `sync = expr`.
    Flag,
}

/// One argument of a word.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Param {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    /// May be written without `name =` at this position (0-based).
    pub(crate) position: Option<usize>,
    pub(crate) required: bool,
}

/// A word's arguments.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Spec {
    pub(crate) params: &'static [Param],
    /// How to write the word, for messages: `timed("name", sync)`.
    pub(crate) usage: &'static str,
}

/// The value written for each param of the spec, in spec order.
pub(crate) type Values = Vec<Option<Expr>>;

pub(crate) fn values(word: &str, spec: &Spec, item: &Item) -> syn::Result<Values> {
    let mut out: Values = vec![None; spec.params.len()];
    let usage = spec.usage;
    let list: &[Arg] = item.args.as_ref().map_or(&[], |a| &a.list);
    let mut errors = Errors::default();
    let mut fail = |span: Span, msg: String| errors.push(syn::Error::new(span, msg));
    for (pos, arg) in list.iter().enumerate() {
        let (index, value, span) = match arg {
            Arg::Named(key, value) => {
                let Some(i) = spec.params.iter().position(|p| key == p.name) else {
                    fail(
                        key.span(),
                        format!("`{word}` has no argument `{key}`: write `{usage}`"),
                    );
                    continue;
                };
                (i, value.clone(), key.span())
            }
            Arg::Expr(e) => {
                // A bare flag name: `sync` means `sync = true`.
                let flag = as_ident(e).and_then(|id| {
                    spec.params
                        .iter()
                        .position(|p| p.kind == Kind::Flag && id == p.name)
                });
                if let Some(i) = flag {
                    (i, syn::parse_quote_spanned!(e.span()=> true), e.span())
                } else if let Some(i) = spec.params.iter().position(|p| p.position == Some(pos)) {
                    (i, e.clone(), e.span())
                } else {
                    fail(
                        e.span(),
                        format!("unexpected argument to `{word}`: write `{usage}`"),
                    );
                    continue;
                }
            }
        };
        let param = &spec.params[index];
        if out[index].is_some() {
            fail(
                span,
                format!("`{}` is given twice to `{word}`; keep one", param.name),
            );
            continue;
        }
        if param.kind == Kind::Str && !is_str_lit(&value) {
            fail(
                value.span(),
                format!(
                    "`{}` of `{word}` must be a string literal: write `{usage}`",
                    param.name
                ),
            );
            continue;
        }
        out[index] = Some(value);
    }
    for (p, v) in spec.params.iter().zip(&out) {
        if p.required && v.is_none() {
            let span = item.args.as_ref().map_or(item.name.span(), |a| a.span);
            fail(
                span,
                format!("`{word}` needs `{} = …`: write `{usage}`", p.name),
            );
        }
    }
    errors.finish()?;
    Ok(out)
}

fn as_ident(e: &Expr) -> Option<&syn::Ident> {
    match e {
        Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => p.path.get_ident(),
        _ => None,
    }
}

fn is_str_lit(e: &Expr) -> bool {
    matches!(e, Expr::Lit(l) if matches!(l.lit, Lit::Str(_)))
}

/// `timed`, `timed("name")`, `timed(name = "…", sync)`, `timed(sync = flag)`.
pub(crate) const TIMED: Spec = Spec {
    params: &[
        Param {
            name: "name",
            kind: Kind::Str,
            position: Some(0),
            required: false,
        },
        Param {
            name: "sync",
            kind: Kind::Flag,
            position: None,
            required: false,
        },
    ],
    usage: "timed(\"name\", sync)",
};

/// `memory_scope`, `memory_scope("name")`.
pub(crate) const MEMORY: Spec = Spec {
    params: &[Param {
        name: "name",
        kind: Kind::Str,
        position: Some(0),
        required: false,
    }],
    usage: "memory_scope(\"name\")",
};

/// `gpu_memory_scope(device = 0, empty_cache = false, name = "…")`.
pub(crate) const GPU_MEMORY: Spec = Spec {
    params: &[
        Param {
            name: "device",
            kind: Kind::Expr,
            position: None,
            required: true,
        },
        Param {
            name: "empty_cache",
            kind: Kind::Flag,
            position: None,
            required: false,
        },
        Param {
            name: "name",
            kind: Kind::Str,
            position: None,
            required: false,
        },
    ],
    usage: "gpu_memory_scope(device = 0, empty_cache = true, name = \"…\")",
};

/// Fills in an unwritten `name` as `concat!(module_path!(), suffix)`.
pub(crate) fn default_name(values: &mut Values, spec: &Spec, suffix: &str) {
    if let Some(i) = spec.params.iter().position(|p| p.name == "name")
        && let Some(slot @ None) = values.get_mut(i)
    {
        *slot = Some(syn::parse_quote!(
            ::core::concat!(::core::module_path!(), #suffix)
        ));
    }
}
