//! `#[recompute]`: turns a function into a call of
//! `tch_scope::autograd::recompute` (activation recomputation). Its own
//! small expansion, not a row of the word table: the `&Tensor` parameters
//! are the inputs, every other parameter is captured (an owned copy
//! sharing its tensors, `autograd::Capture`), and the body becomes the
//! recomputed closure.
//!
//! ```text
//! #[recompute]
//! fn block(x: &Tensor, lin: &nn::Linear) -> Tensor { BODY }
//! // becomes
//! fn block(x: &Tensor, lin: &nn::Linear) -> Tensor {
//!     let __c1 = Capture::capture(lin);
//!     let __outs = recompute(&[x], move |__ins| {
//!         let x = __ins[0];
//!         let lin = &__c1;
//!         let __r: Tensor = (|| BODY)();
//!         vec![__r]
//!     });
//!     /* the one output */
//! }
//! ```

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned};
use syn::parse::{ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, LitStr, Pat, ReturnType, Signature, Token, Type, Visibility};

const USAGE: &str = "`#[recompute]` takes no arguments other than `crate = \"path\"`";

/// The attribute's entry point (`args`: the attribute's own tokens).
pub(crate) fn attribute(args: TokenStream, item: TokenStream) -> TokenStream {
    match expand(args, item.clone()) {
        Ok(out) => out,
        // The function as written, plus the errors: the rest of the user's
        // code still type-checks against it.
        Err(e) => {
            let errors = e.to_compile_error();
            quote! { #errors #item }
        }
    }
}

struct Func {
    attrs: Vec<Attribute>,
    vis: Visibility,
    sig: Signature,
    block: Group,
}

fn parse_fn(input: ParseStream) -> syn::Result<Func> {
    let attrs = input.call(Attribute::parse_outer)?;
    let vis: Visibility = input.parse()?;
    let sig: Signature = input.parse()?;
    let block = match input.parse::<TokenTree>()? {
        TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => g,
        other => {
            return Err(syn::Error::new(
                other.span(),
                "`#[recompute]` needs a function body",
            ));
        }
    };
    Ok(Func {
        attrs,
        vis,
        sig,
        block,
    })
}

fn crate_path(args: TokenStream) -> syn::Result<TokenStream> {
    if args.is_empty() {
        return Ok(quote!(::tch_scope));
    }
    let parser = |input: ParseStream| -> syn::Result<syn::Path> {
        let _: Token![crate] = input.parse()?;
        let _: Token![=] = input.parse()?;
        let lit: LitStr = input.parse()?;
        if !input.is_empty() {
            return Err(input.error(USAGE));
        }
        lit.parse::<syn::Path>()
    };
    let at = args.span();
    let path = parser
        .parse2(args)
        .map_err(|_| syn::Error::new(at, USAGE))?;
    Ok(quote!(#path))
}

fn push(errors: &mut Option<syn::Error>, e: syn::Error) {
    match errors {
        Some(all) => all.combine(e),
        None => *errors = Some(e),
    }
}

/// `&Tensor` (any path ending in `Tensor`, any lifetime), not `&mut`.
fn is_tensor_ref(ty: &Type) -> bool {
    match ty {
        Type::Reference(r) => r.mutability.is_none() && is_tensor(&r.elem),
        Type::Paren(p) => is_tensor_ref(&p.elem),
        Type::Group(g) => is_tensor_ref(&g.elem),
        _ => false,
    }
}

fn is_tensor(ty: &Type) -> bool {
    match ty {
        Type::Path(p) => {
            p.qself.is_none()
                && p.path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "Tensor" && s.arguments.is_none())
        }
        Type::Paren(p) => is_tensor(&p.elem),
        Type::Group(g) => is_tensor(&g.elem),
        _ => false,
    }
}

/// How many tensors the return type holds: `Tensor` is one, a tuple of
/// `Tensor`s its length; `None` for anything else.
fn returned_tensors(ty: &Type) -> Option<usize> {
    match ty {
        _ if is_tensor(ty) => Some(1),
        Type::Tuple(t) if !t.elems.is_empty() && t.elems.iter().all(is_tensor) => {
            Some(t.elems.len())
        }
        Type::Paren(p) => returned_tensors(&p.elem),
        _ => None,
    }
}

enum Param {
    Input(Pat),
    /// A reference to a captured value.
    ByRef(Pat, TokenStream),
    /// A captured value, cloned (`Capture::capture`) for every run.
    ByValue(Pat, TokenStream),
}

fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let krate = crate_path(args);
    let func = parse_fn.parse2(item)?;
    let mut errors = None;
    let krate = krate.unwrap_or_else(|e| {
        push(&mut errors, e);
        quote!(::tch_scope)
    });
    let sig = &func.sig;
    if let Some(a) = sig.asyncness {
        push(
            &mut errors,
            syn::Error::new(
                a.span,
                "`#[recompute]` can't go on an `async fn`: the backward re-runs the body \
                 synchronously; recompute a synchronous helper and call it from the async code",
            ),
        );
    }
    let mut params = Vec::new();
    for (i, arg) in sig.inputs.iter().enumerate() {
        match arg {
            FnArg::Receiver(r) => push(
                &mut errors,
                syn::Error::new_spanned(
                    r,
                    "`#[recompute]` can't go on a method with `self`: pass the module as a \
                     parameter (`m: &Model`) so that it is captured",
                ),
            ),
            FnArg::Typed(pt) => {
                let pat = (*pt.pat).clone();
                if !matches!(pat, Pat::Ident(ref p) if p.by_ref.is_none() && p.subpat.is_none()) {
                    push(
                        &mut errors,
                        syn::Error::new_spanned(
                            &pt.pat,
                            "`#[recompute]` needs a plain name for each parameter",
                        ),
                    );
                    continue;
                }
                let c = format_ident!("__tch_scope_c{}", i, span = Span::mixed_site());
                let ty = &pt.ty;
                if is_tensor_ref(ty) {
                    params.push(Param::Input(pat));
                } else if let Type::Reference(r) = &**ty {
                    if r.mutability.is_some() {
                        push(
                            &mut errors,
                            syn::Error::new_spanned(
                                ty,
                                "`#[recompute]` can't capture a `&mut` parameter: the body runs \
                                 twice (forward, then again in backward)",
                            ),
                        );
                        continue;
                    }
                    params.push(Param::ByRef(pat, quote!(#c)));
                } else {
                    params.push(Param::ByValue(pat, quote!(#c)));
                }
            }
        }
    }
    if !sig
        .inputs
        .iter()
        .any(|a| matches!(a, FnArg::Typed(pt) if is_tensor_ref(&pt.ty)))
    {
        push(
            &mut errors,
            syn::Error::new(
                sig.paren_token.span.join(),
                "`#[recompute]` needs at least one `&Tensor` parameter: the tensor parameters \
                 are the inputs kept for the backward",
            ),
        );
    }
    let (ret_ty, n_out) = match &sig.output {
        ReturnType::Default => {
            push(
                &mut errors,
                syn::Error::new(
                    sig.ident.span(),
                    "`#[recompute]` needs a return type of `Tensor` or a tuple of `Tensor`s",
                ),
            );
            (quote!(()), 0)
        }
        ReturnType::Type(_, ty) => match returned_tensors(ty) {
            Some(n) => (quote!(#ty), n),
            None => {
                push(
                    &mut errors,
                    syn::Error::new_spanned(
                        ty,
                        "`#[recompute]` returns a `Tensor` or a tuple of `Tensor`s: the outputs \
                         of the recomputed function",
                    ),
                );
                (quote!(#ty), 0)
            }
        },
    };
    if let Some(e) = errors {
        return Err(e);
    }

    let Func {
        attrs,
        vis,
        sig,
        block,
    } = &func;
    let span = Span::mixed_site();
    let ins = quote_spanned!(span=> __tch_scope_ins);
    let outs = quote_spanned!(span=> __tch_scope_outs);
    let mut inputs = Vec::new();
    let mut captures = Vec::new();
    let mut rebinds = Vec::new();
    for p in &params {
        match p {
            Param::Input(pat) => {
                let Pat::Ident(id) = pat else { unreachable!() };
                let name = &id.ident;
                let k = inputs.len();
                inputs.push(quote!(#name));
                rebinds.push(quote!(let #pat = #ins[#k];));
            }
            Param::ByRef(pat, c) => {
                let Pat::Ident(id) = pat else { unreachable!() };
                let name = &id.ident;
                captures.push(quote!(let #c = #krate::autograd::Capture::capture(#name);));
                rebinds.push(quote!(let #pat = &#c;));
            }
            Param::ByValue(pat, c) => {
                let Pat::Ident(id) = pat else { unreachable!() };
                let name = &id.ident;
                captures.push(quote!(let #c = #name;));
                rebinds.push(quote!(let #pat = #krate::autograd::Capture::capture(&#c);));
            }
        }
    }
    let r = quote_spanned!(span=> __tch_scope_r);
    let (pack, unpack) = if n_out == 1 {
        (
            quote!(::std::vec![#r]),
            quote!(#krate::autograd::__one_output(#outs)),
        )
    } else {
        let names: Vec<_> = (0..n_out)
            .map(|i| format_ident!("__tch_scope_o{}", i, span = span))
            .collect();
        let takes = (0..n_out).map(|_| quote!(#krate::autograd::__next_output(&mut #outs)));
        (
            quote!({ let (#(#names,)*) = #r; ::std::vec![#(#names),*] }),
            quote!({ let mut #outs = #outs.into_iter(); (#(#takes,)*) }),
        )
    };
    let tensor = quote!(#krate::autograd::__tch::Tensor);
    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            #(#captures)*
            let #outs = #krate::autograd::recompute(
                &[#(#inputs),*],
                move |#ins: &[&#tensor]| -> ::std::vec::Vec<#tensor> {
                    #(#rebinds)*
                    #[allow(clippy::redundant_closure_call)]
                    let #r: #ret_ty = (|| #block)();
                    #pack
                },
            );
            #unpack
        }
    })
}
