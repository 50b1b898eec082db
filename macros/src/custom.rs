//! Words whose arguments follow their own rules: `autocast(cpu, bf16)`,
//! `checkpoint(vs, "path", resume)`, `detect_anomaly(check_nan = false)`,
//! `deterministic(warn_only)`. Each is a [`Custom`] in its `words.rs` row:
//! a checker that turns the written item into a constructor call.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Expr, Ident};

use crate::ast::{Arg, Item};
use crate::options::{self, Kind, Param, Spec};
use crate::valid::Ctor;

/// A word with its own argument checks.
#[derive(Debug)]
pub(crate) struct Custom {
    /// The argument names, for messages.
    pub(crate) params: &'static [&'static str],
    /// How to write the word, for messages.
    pub(crate) usage: &'static str,
    /// Checks the item; the constructor is a `__private` function call.
    pub(crate) check: fn(&Item) -> syn::Result<Ctor>,
}

impl PartialEq for Custom {
    fn eq(&self, other: &Self) -> bool {
        self.usage == other.usage
    }
}

impl Eq for Custom {}

pub(crate) const AUTOCAST: Custom = Custom {
    params: &["device_type", "dtype"],
    usage: "autocast(cpu, bf16)",
    check: autocast,
};

pub(crate) const CHECKPOINT: Custom = Custom {
    params: &["vs", "path"],
    usage: "checkpoint(vs, \"model.ot\", resume)",
    check: checkpoint,
};

pub(crate) const DETECT_ANOMALY: Custom = Custom {
    params: &[],
    usage: "detect_anomaly(check_nan = false)",
    check: detect_anomaly,
};

pub(crate) const DETERMINISTIC: Custom = Custom {
    params: &[],
    usage: "deterministic(warn_only)",
    check: deterministic,
};

const AUTOCAST_FORMS: &str = "write `autocast(cpu, bf16)`, `autocast(cpu, f16)`, `autocast(cuda, f16)` or `autocast(cuda, bf16)`";

fn ident(arg: &Arg) -> Option<&Ident> {
    match arg {
        Arg::Expr(Expr::Path(p)) if p.qself.is_none() && p.attrs.is_empty() => p.path.get_ident(),
        _ => None,
    }
}

fn arg_span(arg: &Arg) -> Span {
    match arg {
        Arg::Expr(e) => e.span(),
        Arg::Named(key, _) => key.span(),
    }
}

fn autocast(item: &Item) -> syn::Result<Ctor> {
    let Some(args) = &item.args else {
        return Err(syn::Error::new(
            item.name.span(),
            format!("`autocast` needs a device type: {AUTOCAST_FORMS}"),
        ));
    };
    let mut list = args.list.iter();
    let Some(first) = list.next() else {
        return Err(syn::Error::new(
            args.span,
            format!("`autocast` needs a device type: {AUTOCAST_FORMS}"),
        ));
    };
    let device = match ident(first).map(ToString::to_string).as_deref() {
        Some(d @ ("cpu" | "cuda")) => d.to_owned(),
        _ => {
            return Err(syn::Error::new(
                arg_span(first),
                format!("autocast's device type is `cpu` or `cuda`: {AUTOCAST_FORMS}"),
            ));
        }
    };
    // PyTorch's defaults: bf16 on the CPU, f16 on CUDA.
    let dtype = match list.next() {
        None if device == "cpu" => "bf16".to_owned(),
        None => "f16".to_owned(),
        Some(arg) => match ident(arg).map(ToString::to_string).as_deref() {
            Some(t @ ("bf16" | "f16")) => t.to_owned(),
            Some(t @ ("bfloat16" | "float16" | "half")) => {
                let short = if t == "bfloat16" { "bf16" } else { "f16" };
                return Err(syn::Error::new(
                    arg_span(arg),
                    format!("`{t}` is spelled `{short}` here: {AUTOCAST_FORMS}"),
                ));
            }
            _ => {
                return Err(syn::Error::new(
                    arg_span(arg),
                    format!("autocast's dtype is `bf16` or `f16`: {AUTOCAST_FORMS}"),
                ));
            }
        },
    };
    if let Some(extra) = list.next() {
        return Err(syn::Error::new(
            arg_span(extra),
            format!("`autocast` takes a device type and a dtype: {AUTOCAST_FORMS}"),
        ));
    }
    Ok(Ctor::Named(
        match (device.as_str(), dtype.as_str()) {
            ("cpu", "bf16") => "autocast_cpu_bf16",
            ("cpu", _) => "autocast_cpu_f16",
            (_, "f16") => "autocast_cuda_f16",
            _ => "autocast_cuda_bf16",
        },
        Vec::new(),
    ))
}

const CHECKPOINT_FORMS: &str = "write `checkpoint(vs, \"model.ot\")`, or `checkpoint(vs, \"model.ot\", resume)` to load it on entry";

fn checkpoint(item: &Item) -> syn::Result<Ctor> {
    let needs = |span| {
        syn::Error::new(
            span,
            format!("`checkpoint` needs a VarStore and a path: {CHECKPOINT_FORMS}"),
        )
    };
    let Some(args) = &item.args else {
        return Err(needs(item.name.span()));
    };
    let mut exprs = Vec::new();
    let mut resume = None;
    for (i, arg) in args.list.iter().enumerate() {
        match (i, arg) {
            (0 | 1, Arg::Expr(e)) => exprs.push(e.clone()),
            (2, Arg::Expr(_)) if ident(arg).is_some_and(|id| id == "resume") => {
                resume = Some(syn::parse_quote_spanned!(arg_span(arg)=> true));
            }
            (2, Arg::Named(key, value)) if key == "resume" => resume = Some(value.clone()),
            _ => {
                return Err(syn::Error::new(
                    arg_span(arg),
                    format!("unexpected argument to `checkpoint`: {CHECKPOINT_FORMS}"),
                ));
            }
        }
    }
    if exprs.len() < 2 {
        return Err(needs(args.span));
    }
    let (vs, path) = (&exprs[0], &exprs[1]);
    // A reference, so the scope borrows the VarStore instead of moving it.
    let vs: Expr = syn::parse_quote_spanned!(vs.span()=> &(#vs));
    let resume = resume.unwrap_or_else(|| syn::parse_quote!(false));
    Ok(Ctor::Named("checkpoint", vec![vs, path.clone(), resume]))
}

/// One optional flag, `false` (or `default`) when absent.
fn flag(word: &'static str, spec: &Spec, item: &Item, default: bool) -> syn::Result<Ctor> {
    let mut values = options::values(word, spec, item)?;
    let value = values
        .pop()
        .flatten()
        .unwrap_or_else(|| syn::parse_quote!(#default));
    Ok(Ctor::Named(word, vec![value]))
}

const DETECT_ANOMALY_SPEC: Spec = Spec {
    params: &[Param {
        name: "check_nan",
        kind: Kind::Flag,
        position: None,
        required: false,
    }],
    usage: DETECT_ANOMALY.usage,
};

const DETERMINISTIC_SPEC: Spec = Spec {
    params: &[Param {
        name: "warn_only",
        kind: Kind::Flag,
        position: None,
        required: false,
    }],
    usage: DETERMINISTIC.usage,
};

fn detect_anomaly(item: &Item) -> syn::Result<Ctor> {
    flag("detect_anomaly", &DETECT_ANOMALY_SPEC, item, true)
}

fn deterministic(item: &Item) -> syn::Result<Ctor> {
    flag("deterministic", &DETERMINISTIC_SPEC, item, false)
}
