//! The measuring words: `timed`, `memory_scope`, `tensor_memory`,
//! `gpu_memory_scope`. An unnamed one records under the default name (the
//! function's path, or the place of the `scoped!` block).

use proc_macro2::TokenStream;
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;

use super::forms::{self, Values};
use crate::ast::Item;
use crate::word::{Cx, DefaultName, Word};

/// The measurement's name, a `&'static str` expression: the one written,
/// the function's path, `module::Type::method` for a method, or the
/// place of a `scoped!` (module, line and column: two on one line differ).
fn name(word: &Word, item: &Item, values: &Values, cx: &Cx) -> TokenStream {
    let span = item.name.span();
    match (forms::value(word, values, "name"), &cx.default_name) {
        (Some(name), _) => name.into_token_stream(),
        (None, Some(DefaultName::Function(name))) => name.clone(),
        (None, Some(DefaultName::Method(method))) => {
            let private = cx.private(span);
            let method = method.to_string();
            quote_spanned! {span=> {
                static __TCH_SCOPE_NAME: #private::MethodName = #private::MethodName::new();
                __TCH_SCOPE_NAME.get(
                    ::core::module_path!(),
                    #method,
                    ::core::any::type_name::<Self>,
                )
            }}
        }
        (None, None) => quote_spanned! {span=>
            ::core::concat!(
                ::core::module_path!(),
                ":",
                ::core::line!(),
                ":",
                ::core::column!()
            )
        },
    }
}

/// The `&'static Site` of a `timed`: a `static` per use, found by the
/// registry without hashing the name; a method's is made at its first
/// run, when `Self`'s name is known.
fn site(word: &Word, item: &Item, values: &Values, cx: &Cx) -> TokenStream {
    let span = item.name.span();
    let private = cx.private(span);
    if let (None, Some(DefaultName::Method(method))) =
        (forms::value(word, values, "name"), &cx.default_name)
    {
        let method = method.to_string();
        return quote_spanned! {span=> {
            static __TCH_SCOPE_SITE: #private::MethodSite = #private::MethodSite::new();
            __TCH_SCOPE_SITE.get(
                ::core::module_path!(),
                #method,
                ::core::any::type_name::<Self>,
            )
        }};
    }
    let name = name(word, item, values, cx);
    quote_spanned! {span=> {
        static __TCH_SCOPE_SITE: #private::Site = #private::Site::new(#name);
        &__TCH_SCOPE_SITE
    }}
}

/// `timed(site, sync)`: one static call site per use, so the registry
/// finds its slot without hashing the name.
pub(crate) fn timed(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let values = forms::options(word, item)?;
    let span = item.name.span();
    let private = cx.private(span);
    let site = site(word, item, &values, cx);
    let sync = match (
        forms::value(word, &values, "sync"),
        forms::value(word, &values, "events"),
    ) {
        (Some(_), Some(events)) => {
            return Err(syn::Error::new(
                events.span(),
                "`sync` and `events` are two ways to time CUDA work (a device-wide \
                 synchronise, or CUDA events on the current stream); keep one",
            ));
        }
        (Some(flag), None) => quote_spanned!(span=> #private::sync_flag(#flag)),
        (None, Some(flag)) => quote_spanned!(span=> #private::events_flag(#flag)),
        (None, None) => quote_spanned!(span=> #private::SyncMode::Auto),
    };
    Ok(quote_spanned!(span=> #private::timed(#site, #sync)))
}

/// `memory_scope` and `tensor_memory`: a name, written or the default.
pub(crate) fn memory_scope(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let values = forms::options(word, item)?;
    let name = name(word, item, &values, cx);
    Ok(forms::private_call(word, item, cx, &[name]))
}

pub(crate) fn gpu_memory_scope(word: &Word, item: &Item, cx: &Cx) -> syn::Result<TokenStream> {
    let values = forms::options(word, item)?;
    let name = name(word, item, &values, cx);
    let device = forms::value(word, &values, "device")
        .map_or_else(|| quote!(0usize), ToTokens::into_token_stream);
    let empty = forms::value(word, &values, "empty_cache")
        .map_or_else(|| quote!(true), ToTokens::into_token_stream);
    Ok(forms::private_call(word, item, cx, &[name, device, empty]))
}
