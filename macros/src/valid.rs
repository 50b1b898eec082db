//! Turns parsed items into checked scopes, reporting every mistake (each on
//! its token, each saying what to write instead) rather than the first.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprUnary, Lit, UnOp};

use crate::ast::{Arg, Args, Item};
use crate::options;
use crate::words::{self, Shape, Word};

/// Collects errors so they can be reported together.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }

    /// All errors so far, or `error` if there are none.
    pub(crate) fn or(self, error: syn::Error) -> syn::Error {
        self.0.unwrap_or(error)
    }

    /// All errors so far, then `error`.
    pub(crate) fn and(self, error: syn::Error) -> syn::Error {
        match self.0 {
            Some(mut all) => {
                all.combine(error);
                all
            }
            None => error,
        }
    }
}

/// A checked list item.
pub(crate) struct Scope {
    pub(crate) word: &'static Word,
    /// The word's name as written: expansions carry it so that rustc's
    /// errors about the scope point there.
    pub(crate) span: Span,
    pub(crate) ctor: Ctor,
    pub(crate) cond: Option<Expr>,
}

/// How to build the runtime scope value.
pub(crate) enum Ctor {
    /// `__private::<word>(args..)`.
    Call(Vec<Expr>),
    DeviceCpu,
    DeviceMps,
    DeviceCuda(usize, Span),
    /// A runtime value, converted by `__private::device`.
    DeviceExpr(Expr),
    With(Expr),
    /// `__private::<word>(&(model))`.
    Model(Expr),
    /// One value per argument of the word's `options::Spec`, in spec order.
    Options(options::Values),
    /// `distributed(..)`, checked by `distributed.rs`.
    Distributed(Box<crate::distributed::Args>),
    /// `__private::<function>(args..)`, from a `custom.rs` checker.
    Named(&'static str, Vec<Expr>),
}

pub(crate) fn validate(items: Vec<Item>, errors: &mut Errors) -> Vec<Scope> {
    let mut seen: Vec<Seen> = Vec::new();
    let mut scopes = Vec::new();
    for item in items {
        let name = item.name.unraw().to_string();
        let Some(word) = words::lookup(&name) else {
            errors.push(unknown(&item));
            continue;
        };
        let seen_here = Seen {
            word,
            target: target(word, &item),
        };
        if let Some(e) = conflict(&seen_here, &seen, &item) {
            errors.push(e);
            continue;
        }
        seen.push(seen_here);
        match ctor(word, &item) {
            Ok(ctor) => scopes.push(Scope {
                word,
                span: item.name.span(),
                ctor,
                cond: item.cond,
            }),
            Err(e) => errors.push(e),
        }
    }
    scopes
}

fn unknown(item: &Item) -> syn::Error {
    let name = item.name.to_string();
    // A likely typo gets the one fix; otherwise the whole (short) list.
    let message = match words::suggest(&name) {
        Some(known) => format!("unknown scope word `{name}`; did you mean `{known}`?"),
        None => format!(
            "unknown scope word `{name}`; known words: {}",
            words::known_list()
        ),
    };
    syn::Error::new(item.name.span(), message)
}

/// A word already in the list, and what it acts on.
struct Seen {
    word: &'static Word,
    /// For model words, the model's tokens: `eval(a), train(b)` act on
    /// different models and don't conflict. `None` for every other word.
    target: Option<String>,
}

fn target(word: &Word, item: &Item) -> Option<String> {
    if word.shape != Shape::Model {
        return None;
    }
    let first = item.args.as_ref()?.list.first()?;
    match first {
        Arg::Expr(e) => Some(quote::ToTokens::to_token_stream(e).to_string()),
        Arg::Named(..) => None,
    }
}

fn conflict(here: &Seen, seen: &[Seen], item: &Item) -> Option<syn::Error> {
    let word = here.word;
    let same = |s: &&Seen| s.target == here.target;
    let message = if !word.repeat && seen.iter().filter(same).any(|s| s.word.name == word.name) {
        format!("`{}` appears twice in this list; keep one", word.name)
    } else {
        let earlier = seen.iter().filter(same).find(|s| {
            word.group.is_some() && s.word.group == word.group && s.word.name != word.name
        })?;
        match &here.target {
            Some(model) => format!(
                "`{}({model})` contradicts `{}({model})` earlier in this list; keep one",
                word.name, earlier.word.name
            ),
            None => format!(
                "`{}` contradicts `{}` earlier in this list; keep one",
                word.name, earlier.word.name
            ),
        }
    };
    Some(syn::Error::new(item.name.span(), message))
}

fn ctor(word: &Word, item: &Item) -> syn::Result<Ctor> {
    if let Shape::Options(spec) = word.shape {
        return Ok(Ctor::Options(options::values(word.name, spec, item)?));
    }
    if word.shape == Shape::Distributed {
        return Ok(Ctor::Distributed(Box::new(crate::distributed::check(
            item,
        )?)));
    }
    if let Shape::Custom(custom) = word.shape {
        return (custom.check)(item);
    }
    let mut exprs = positional(word, item)?;
    Ok(match word.shape {
        // (`Options` words returned above.)
        Shape::Bare
        | Shape::Exprs(_)
        | Shape::Options(_)
        | Shape::Distributed
        | Shape::Custom(_) => Ctor::Call(exprs),
        Shape::Device => device(exprs.remove(0))?,
        Shape::Scope => Ctor::With(exprs.remove(0)),
        Shape::Model => Ctor::Model(exprs.remove(0)),
    })
}

/// Checks the argument count; returns exactly `word.params().len()` exprs.
fn positional(word: &Word, item: &Item) -> syn::Result<Vec<Expr>> {
    let want = word.params().len();
    let usage = word.usage();
    let name = word.name;
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

fn arg_span(arg: &Arg) -> Span {
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

const DEVICE_FORMS: &str = "write a CUDA index such as `device(0)`, `device(cpu)`, \
    a device string \"cpu\", \"mps\" or \"cuda:N\" (N a non-negative integer, e.g. \"cuda:0\"), \
    or an expression of a device type";

const CUDA_NEEDS_INDEX: &str =
    "write `device(0)` or `device(\"cuda:0\")`: the CUDA device needs an index";

/// Checks literal devices now; anything else is converted at run time.
fn device(expr: Expr) -> syn::Result<Ctor> {
    match peel(&expr) {
        Expr::Lit(ExprLit { lit, .. }) => device_lit(lit),
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr: inner,
            ..
        }) if matches!(peel(inner), Expr::Lit(_)) => Err(syn::Error::new_spanned(
            &expr,
            "a device index can't be negative: write `device(0)` for the first CUDA device",
        )),
        Expr::Path(path) if path.qself.is_none() && path.attrs.is_empty() => {
            match path.path.get_ident().map(ToString::to_string).as_deref() {
                Some("cpu") => Ok(Ctor::DeviceCpu),
                Some("mps") => Ok(Ctor::DeviceMps),
                Some("cuda") => Err(syn::Error::new_spanned(path, CUDA_NEEDS_INDEX)),
                _ => Ok(Ctor::DeviceExpr(expr)),
            }
        }
        _ => Ok(Ctor::DeviceExpr(expr)),
    }
}

/// Looks through parentheses and the invisible groups of `$e:expr`.
fn peel(mut expr: &Expr) -> &Expr {
    loop {
        match expr {
            Expr::Paren(p) => expr = &p.expr,
            Expr::Group(g) => expr = &g.expr,
            _ => return expr,
        }
    }
}

fn device_lit(lit: &Lit) -> syn::Result<Ctor> {
    match lit {
        Lit::Int(int) if !INT_SUFFIXES.contains(&int.suffix()) => Err(syn::Error::new(
            int.span(),
            format!("this literal is not a device: {DEVICE_FORMS}"),
        )),
        Lit::Int(int) => {
            let index = int.base10_parse::<usize>().map_err(|_| {
                syn::Error::new(int.span(), "this device index doesn't fit in a `usize`")
            })?;
            Ok(Ctor::DeviceCuda(index, int.span()))
        }
        Lit::Str(s) => match s.value().as_str() {
            "cpu" => Ok(Ctor::DeviceCpu),
            "mps" => Ok(Ctor::DeviceMps),
            "cuda" => Err(syn::Error::new(s.span(), CUDA_NEEDS_INDEX)),
            other => match cuda_index(other) {
                Some(index) => Ok(Ctor::DeviceCuda(index, s.span())),
                None => Err(syn::Error::new(
                    s.span(),
                    format!("unknown device string {other:?}: {DEVICE_FORMS}"),
                )),
            },
        },
        _ => Err(syn::Error::new(
            lit.span(),
            format!("this literal is not a device: {DEVICE_FORMS}"),
        )),
    }
}

const INT_SUFFIXES: &[&str] = &[
    "", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize",
];

/// `"cuda:N"` with N all ASCII digits (so no `+1`, no spaces).
fn cuda_index(s: &str) -> Option<usize> {
    let digits = s.strip_prefix("cuda:")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
