//! The `distributed(..)` word: checks its arguments at compile time and
//! builds `__private::Distributed`.
//!
//! ```text
//! distributed(rank = r, world_size = n, master = "host:port"[, backend = gloo][, timeout = d])
//! distributed(from_env[, backend = gloo][, timeout = d])
//! ```

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::spanned::Spanned;
use syn::{Expr, Lit};

use crate::ast::{Arg, Item};
use crate::errors::Errors;
use crate::word::{Cx, Word};

const USAGE: &str = "distributed(rank = 0, world_size = 2, master = \"127.0.0.1:29500\")` \
     or `distributed(from_env)";

const BACKENDS: &str = "`gloo` (CPU tensors) or `nccl` (CUDA tensors)";

/// `RT::__private::Distributed::new(..)` or `::from_env()`.
pub(crate) fn check(_: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let args = args(item)?;
    let span = item.name.span();
    Ok(expand(&cx.private(span), &args, span))
}

/// The checked arguments.
struct Args {
    backend: Option<(&'static str, Span)>,
    source: Source,
    timeout: Option<Expr>,
}

enum Source {
    FromEnv,
    Explicit(Box<Explicit>),
}

struct Explicit {
    rank: Expr,
    world_size: Expr,
    master: Expr,
}

/// Reports every mistake in the arguments, each on its token.
fn args(item: &Item) -> syn::Result<Args> {
    let mut errors = Errors::default();
    let mut fail = |span: Span, msg: String| errors.push(syn::Error::new(span, msg));
    let list: &[Arg] = item.args.as_ref().map_or(&[], |a| &a.list);
    let (mut from_env, mut backend, mut timeout) = (None::<Span>, None, None);
    let (mut rank, mut world_size, mut master) = (None, None, None);
    for arg in list {
        match arg {
            Arg::Expr(e) if arg.ident().is_some_and(|id| id == "from_env") => {
                if from_env.replace(e.span()).is_some() {
                    fail(e.span(), "`from_env` is given twice; keep one".into());
                }
            }
            Arg::Expr(e) => fail(
                e.span(),
                format!("unexpected argument to `distributed`: write `{USAGE}`"),
            ),
            Arg::Named(key, value) => {
                let slot = match key.to_string().as_str() {
                    "backend" => match backend_name(value) {
                        Ok(name) => {
                            if backend.replace((name, value.span())).is_some() {
                                fail(key.span(), "`backend` is given twice; keep one".into());
                            }
                            continue;
                        }
                        Err(e) => {
                            fail(e.span(), e.to_string());
                            continue;
                        }
                    },
                    "rank" => &mut rank,
                    "world_size" => &mut world_size,
                    "master" => {
                        if let Err(e) = master_literal(value) {
                            fail(e.span(), e.to_string());
                        }
                        &mut master
                    }
                    "timeout" => &mut timeout,
                    "from_env" => {
                        fail(
                            key.span(),
                            "write `from_env` alone, without `= …`: `distributed(from_env)`".into(),
                        );
                        continue;
                    }
                    other => {
                        fail(
                            key.span(),
                            format!(
                                "`distributed` has no argument `{other}`; it takes `backend`, \
                                 `rank`, `world_size`, `master`, `timeout` or `from_env`"
                            ),
                        );
                        continue;
                    }
                };
                if slot.replace(value.clone()).is_some() {
                    fail(key.span(), format!("`{key}` is given twice; keep one"));
                }
            }
        }
    }
    let source = match from_env {
        Some(_) => {
            for (name, given) in [
                ("rank", &rank),
                ("world_size", &world_size),
                ("master", &master),
            ] {
                if let Some(e) = given {
                    fail(
                        e.span(),
                        format!(
                            "`{name}` contradicts `from_env`, which reads RANK, WORLD_SIZE, \
                             MASTER_ADDR and MASTER_PORT from the environment; keep one"
                        ),
                    );
                }
            }
            Some(Source::FromEnv)
        }
        None => match (rank, world_size, master) {
            (Some(rank), Some(world_size), Some(master)) => {
                Some(Source::Explicit(Box::new(Explicit {
                    rank,
                    world_size,
                    master,
                })))
            }
            (rank, world_size, master) => {
                let missing: Vec<&str> = [
                    ("`rank = …`", rank.is_none()),
                    ("`world_size = …`", world_size.is_none()),
                    ("`master = \"host:port\"`", master.is_none()),
                ]
                .into_iter()
                .filter_map(|(name, absent)| absent.then_some(name))
                .collect();
                let span = item.args.as_ref().map_or(item.name.span(), |a| a.span);
                fail(
                    span,
                    format!(
                        "`distributed` needs {}, or `from_env`: write `{USAGE}`",
                        missing.join(", ")
                    ),
                );
                None
            }
        },
    };
    errors.finish()?;
    let source = source.expect("a missing source is reported");
    Ok(Args {
        backend,
        source,
        timeout,
    })
}

/// `gloo`, `nccl`, or the same as string literals.
fn backend_name(value: &Expr) -> syn::Result<&'static str> {
    let written = match value {
        Expr::Path(p) if p.qself.is_none() => p.path.get_ident().map(ToString::to_string),
        Expr::Lit(l) => match &l.lit {
            Lit::Str(s) => Some(s.value()),
            _ => None,
        },
        _ => None,
    };
    match written.as_deref() {
        Some("gloo") => Ok("Gloo"),
        Some("nccl") => Ok("Nccl"),
        Some(other) => Err(syn::Error::new(
            value.span(),
            format!("unknown backend `{other}`: tch-scope supports {BACKENDS}"),
        )),
        None => Err(syn::Error::new(
            value.span(),
            format!("`backend` must be written out, as {BACKENDS}"),
        )),
    }
}

/// A literal master must be `"host:port"`; other expressions are checked
/// at run time.
fn master_literal(value: &Expr) -> syn::Result<()> {
    let Expr::Lit(l) = value else { return Ok(()) };
    let Lit::Str(s) = &l.lit else {
        return Err(syn::Error::new(
            value.span(),
            "`master` is a \"host:port\" string, e.g. \"127.0.0.1:29500\"",
        ));
    };
    let text = s.value();
    let ok = text
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if ok {
        Ok(())
    } else {
        Err(syn::Error::new(
            s.span(),
            format!("master {text:?} is not \"host:port\" (e.g. \"127.0.0.1:29500\")"),
        ))
    }
}

/// `RT::__private::Distributed::new(..)` or `::from_env()`, with
/// `.backend(..)` and `.timeout(..)` as written; each argument keeps its
/// span so a type error points at it.
fn expand(private: &TokenStream, args: &Args, span: Span) -> TokenStream {
    let backend = {
        let (name, at) = args.backend.unwrap_or(("Gloo", span));
        let name = syn::Ident::new(name, at);
        quote_spanned!(at=> #private::DistBackend::#name)
    };
    let mut value = match &args.source {
        Source::FromEnv => quote_spanned!(span=>
            #private::Distributed::from_env().backend(#backend)),
        Source::Explicit(explicit) => {
            let Explicit {
                rank,
                world_size,
                master,
            } = &**explicit;
            let rank = quote_spanned!(rank.span()=> #rank);
            let world = quote_spanned!(world_size.span()=> #world_size);
            quote_spanned!(span=>
                #private::Distributed::new(#backend, #rank, #world, #master))
        }
    };
    if let Some(t) = &args.timeout {
        value = quote_spanned!(t.span()=> #value.timeout(#t));
    }
    value
}
