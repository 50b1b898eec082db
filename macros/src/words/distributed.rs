//! The `distributed(..)` word: checks its arguments at compile time and
//! builds `__private::Distributed`.
//!
//! ```text
//! distributed(rank = r, world_size = n, master = "host:port"[, backend = gloo][, timeout = d])
//! distributed(from_env[, backend = gloo][, timeout = d])
//! ```

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::spanned::Spanned;
use syn::{Expr, Lit};

use super::choice;
use crate::errors::Errors;
use crate::expand::cx::Cx;
use crate::word::{Checked, Choice};

const USAGE: &str = "distributed(rank = 0, world_size = 2, master = \"127.0.0.1:29500\")` \
     or `distributed(from_env)";

/// `backend = gloo`, or `"gloo"` as torch.distributed spells it.
pub(crate) const BACKENDS: Choice = Choice {
    what: "backend",
    words: &[("gloo", "CPU tensors"), ("nccl", "CUDA tensors")],
    aliases: &[],
    strings: true,
};

const EXPLICIT: [&str; 3] = ["rank", "world_size", "master"];

/// What the params say together: a source, `from_env` or all of `rank`,
/// `world_size` and `master`, never both; a literal master is
/// `"host:port"`. Every mistake, each on its token.
pub(crate) fn check(checked: &Checked, errors: &mut Errors) {
    if let Some(master) = checked.given("master")
        && let Err(e) = master_literal(&master.value)
    {
        errors.push(e);
    }
    let explicit = EXPLICIT.map(|param| checked.given(param));
    if checked.given("from_env").is_some() {
        for (name, given) in EXPLICIT.iter().zip(&explicit) {
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
    } else if explicit.iter().any(Option::is_none) {
        let missing: Vec<&str> = ["`rank = …`", "`world_size = …`", "`master = \"host:port\"`"]
            .into_iter()
            .zip(&explicit)
            .filter_map(|(name, given)| given.is_none().then_some(name))
            .collect();
        errors.push(syn::Error::new(
            checked.args_span,
            format!(
                "`distributed` needs {}, or `from_env`: write `{USAGE}`",
                missing.join(", ")
            ),
        ));
    }
}

/// `RT::__private::Distributed::new(..)` or `::from_env()`, with
/// `.backend(..)` and `.timeout(..)` as written; each argument keeps its
/// span so a type error points at it.
pub(crate) fn build(checked: &Checked, cx: &Cx) -> TokenStream {
    let span = checked.span;
    let private = cx.private(span);
    let backend = {
        let chosen = checked
            .value("backend")
            .and_then(|v| choice::words(v).pop());
        let (name, at) = match &chosen {
            Some(b) if b == "nccl" => ("Nccl", b.span()),
            Some(b) => ("Gloo", b.span()),
            None => ("Gloo", span),
        };
        let name = syn::Ident::new(name, at);
        quote_spanned!(at=> #private::DistBackend::#name)
    };
    let mut value = match EXPLICIT.map(|param| checked.value(param)) {
        [Some(rank), Some(world_size), Some(master)] if checked.given("from_env").is_none() => {
            let rank = quote_spanned!(rank.span()=> #rank);
            let world = quote_spanned!(world_size.span()=> #world_size);
            quote_spanned!(span=>
                #private::Distributed::new(#backend, #rank, #world, #master))
        }
        _ => quote_spanned!(span=>
            #private::Distributed::from_env().backend(#backend)),
    };
    if let Some(t) = checked.value("timeout") {
        value = quote_spanned!(t.span()=> #value.timeout(#t));
    }
    value
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
