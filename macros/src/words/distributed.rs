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
use syn::{Expr, Ident, Lit};

use super::forms;
use crate::ast::Item;
use crate::errors::Errors;
use crate::word::{Choice, Cx, Word};

const USAGE: &str = "distributed(rank = 0, world_size = 2, master = \"127.0.0.1:29500\")` \
     or `distributed(from_env)";

/// `backend = gloo`, or `"gloo"` as torch.distributed spells it.
pub(crate) const BACKENDS: Choice = Choice {
    what: "backend",
    words: &[("gloo", "CPU tensors"), ("nccl", "CUDA tensors")],
    aliases: &[],
    strings: true,
};

/// `RT::__private::Distributed::new(..)` or `::from_env()`.
pub(crate) fn check(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let args = args(word, item)?;
    let span = item.name.span();
    Ok(expand(&cx.private(span), &args, span))
}

/// The checked arguments.
struct Args {
    backend: Option<Ident>,
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

/// Reads the row's params, then checks what they say together (a source:
/// `from_env` or all of `rank`, `world_size` and `master`, never both);
/// every mistake goes to one list, each on its token.
fn args(word: &Word, item: &Item) -> syn::Result<Args> {
    let mut errors = Errors::default();
    let written = forms::read(word, item, &mut errors);
    let given = |param| forms::given(word, &written, param);
    if let Some(master) = given("master")
        && let Err(e) = master_literal(&master.value)
    {
        errors.push(e);
    }
    let explicit = ["rank", "world_size", "master"].map(given);
    let source = if given("from_env").is_some() {
        for (name, given) in ["rank", "world_size", "master"].iter().zip(&explicit) {
            if let Some(g) = given {
                errors.push(syn::Error::new(
                    g.at,
                    format!(
                        "`{name}` contradicts `from_env`, which reads RANK, WORLD_SIZE, \
                         MASTER_ADDR and MASTER_PORT from the environment; keep one"
                    ),
                ));
            }
        }
        Some(Source::FromEnv)
    } else if let [Some(rank), Some(world_size), Some(master)] = explicit {
        Some(Source::Explicit(Box::new(Explicit {
            rank: rank.value.clone(),
            world_size: world_size.value.clone(),
            master: master.value.clone(),
        })))
    } else {
        let missing: Vec<&str> = ["`rank = …`", "`world_size = …`", "`master = \"host:port\"`"]
            .into_iter()
            .zip(&explicit)
            .filter_map(|(name, given)| given.is_none().then_some(name))
            .collect();
        let span = item.args.as_ref().map_or(item.name.span(), |a| a.span);
        errors.push(syn::Error::new(
            span,
            format!(
                "`distributed` needs {}, or `from_env`: write `{USAGE}`",
                missing.join(", ")
            ),
        ));
        None
    };
    errors.finish()?;
    let source = source.expect("a missing source is reported");
    let backend = given("backend").and_then(|g| forms::words(&g.value).pop());
    let timeout = given("timeout").map(|g| g.value.clone());
    Ok(Args {
        backend,
        source,
        timeout,
    })
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
        let (name, at) = match &args.backend {
            Some(b) if b == "nccl" => ("Nccl", b.span()),
            Some(b) => ("Gloo", b.span()),
            None => ("Gloo", span),
        };
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
