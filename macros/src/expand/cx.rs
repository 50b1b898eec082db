//! What expansion knows besides the checked scopes: where the runtime is,
//! and the name a measurement gets when none is written. A leaf: the
//! rows' build halves (`words/`) take it, and it imports nothing of the
//! crate.

use proc_macro2::{Span, TokenStream};

/// The expansion's context.
pub(crate) struct Cx {
    /// The runtime crate's path (`::tch_scope`, `$crate`, a `crate = "…"`).
    rt: TokenStream,
    /// The name a measurement gets when none is written: the function's
    /// path for an attribute; `None` in `scoped!`, where it is the place.
    pub(crate) default_name: Option<DefaultName>,
}

/// The name of an attributed function's measurements.
pub(crate) enum DefaultName {
    /// `module::path::function`: a `&'static str` expression.
    Function(TokenStream),
    /// A method with a receiver: `module::Type::method`, `Type` known only
    /// at run time (`type_name::<Self>()`).
    Method(syn::Ident),
}

impl Cx {
    pub(crate) fn new(rt: TokenStream, default_name: Option<DefaultName>) -> Self {
        Self { rt, default_name }
    }

    /// `RT::__private`, shown at `span`: `$crate` resolves as before, but
    /// rustc's errors (say, a `with(..)` value that is not a `Scope`) point
    /// at the word rather than at the whole macro call.
    pub(crate) fn private(&self, span: Span) -> TokenStream {
        let rt: TokenStream = self
            .rt
            .clone()
            .into_iter()
            .map(|mut tt| {
                tt.set_span(tt.span().located_at(span));
                tt
            })
            .collect();
        quote::quote_spanned!(span=> #rt::__private)
    }
}
