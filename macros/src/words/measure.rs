//! The measuring words: `timed`, `memory_scope`, `tensor_memory`,
//! `gpu_memory_scope`. An unnamed one records under the default name (the
//! function's path, or the place of the `scoped!` block).

use proc_macro2::TokenStream;
use quote::{ToTokens, quote, quote_spanned};

use super::forms;
use crate::errors::Errors;
use crate::expand::cx::{Cx, DefaultName};
use crate::word::Checked;

/// The measurement's name, a `&'static str` expression: the one written,
/// the function's path, `module::Type::method` for a method, or the
/// place of a `scoped!` (module, line and column: two on one line differ).
fn name(checked: &Checked, cx: &Cx) -> TokenStream {
    let span = checked.span;
    match (checked.value("name"), &cx.default_name) {
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
fn site(checked: &Checked, cx: &Cx) -> TokenStream {
    let span = checked.span;
    let private = cx.private(span);
    if let (None, Some(DefaultName::Method(method))) = (checked.value("name"), &cx.default_name) {
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
    let name = name(checked, cx);
    quote_spanned! {span=> {
        static __TCH_SCOPE_SITE: #private::Site = #private::Site::new(#name);
        &__TCH_SCOPE_SITE
    }}
}

/// `sync` and `events` are two ways to time CUDA work: one at most.
pub(crate) fn check_timed(checked: &Checked, errors: &mut Errors) {
    if let (Some(_), Some(events)) = (checked.given("sync"), checked.given("events")) {
        errors.push(syn::Error::new(
            events.at,
            "`sync` and `events` are two ways to time CUDA work (a device-wide \
             synchronise, or CUDA events on the current stream); keep one",
        ));
    }
}

/// `timed(site, sync)`: one static call site per use, so the registry
/// finds its slot without hashing the name.
pub(crate) fn timed(checked: &Checked, cx: &Cx) -> TokenStream {
    let span = checked.span;
    let private = cx.private(span);
    let site = site(checked, cx);
    let sync = match (checked.value("sync"), checked.value("events")) {
        (Some(flag), _) => quote_spanned!(span=> #private::sync_flag(#flag)),
        (None, Some(flag)) => quote_spanned!(span=> #private::events_flag(#flag)),
        (None, None) => quote_spanned!(span=> #private::SyncMode::Auto),
    };
    quote_spanned!(span=> #private::timed(#site, #sync))
}

/// `memory_scope` and `tensor_memory`: a name, written or the default.
pub(crate) fn memory_scope(checked: &Checked, cx: &Cx) -> TokenStream {
    let name = name(checked, cx);
    forms::private_call(checked, cx, &[name])
}

pub(crate) fn gpu_memory_scope(checked: &Checked, cx: &Cx) -> TokenStream {
    let name = name(checked, cx);
    let device = checked
        .value("device")
        .map_or_else(|| quote!(0usize), ToTokens::into_token_stream);
    let empty = checked
        .value("empty_cache")
        .map_or_else(|| quote!(true), ToTokens::into_token_stream);
    forms::private_call(checked, cx, &[name, device, empty])
}
