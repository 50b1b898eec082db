//! What a function's signature says about its body: the declared return
//! type where it can be named (and whether it is a `Result`), and the
//! future it returns when it builds one (async-trait's
//! `Box::pin(async move { .. })`, an `async` block under `-> impl Future`).
//! Detection only: the shapes that use it are in `fn_body.rs`.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::visit::Visit;
use syn::{ReturnType, Signature, Type};

/// What the return type lets the expansion write.
pub(super) struct Ret {
    /// The declared type where it can be named in a `let` (`()` when none
    /// is written; `None` with `impl Trait` in it).
    pub(super) declared: Option<TokenStream>,
    /// The same when its last path segment is `Result`.
    pub(super) result: Option<TokenStream>,
}

impl Ret {
    pub(super) fn of(output: &ReturnType) -> Ret {
        match output {
            ReturnType::Default => Ret {
                declared: Some(quote!(())),
                result: None,
            },
            ReturnType::Type(_, ty) => Ret::of_type(ty),
        }
    }

    pub(super) fn of_type(ty: &Type) -> Ret {
        if contains_impl(ty) {
            return Ret {
                declared: None,
                result: None,
            };
        }
        Ret {
            declared: Some(ty.to_token_stream()),
            result: is_result(ty).then(|| ty.to_token_stream()),
        }
    }
}

/// A function that returns the future it builds: what async-trait makes
/// of an `async fn` (`Box::pin(async move { .. })` as the body's tail, the
/// shape tracing-attributes recognises), or a `-> impl Future<Output = T>`
/// whose tail is an `async` block.
pub(super) struct ReturnedFuture<'a> {
    /// The statements before the tail, kept as they are.
    pub(super) before: &'a [syn::Stmt],
    /// The `async` block.
    pub(super) future: &'a syn::ExprAsync,
    /// `Box::pin` (async-trait) or nothing.
    pub(super) boxed: Option<&'a syn::Expr>,
    /// The future's `Output` type.
    pub(super) output: Ret,
}

impl<'a> ReturnedFuture<'a> {
    /// The `Output` of the future the signature returns, if it does.
    pub(super) fn output(sig: &Signature) -> Option<&Type> {
        match &sig.output {
            ReturnType::Type(_, ty) => future_output(ty),
            ReturnType::Default => None,
        }
    }

    pub(super) fn find(sig: &Signature, block: &'a syn::Block) -> Option<ReturnedFuture<'a>> {
        let output = Self::output(sig)?;
        let (last, before) = block.stmts.split_last()?;
        let syn::Stmt::Expr(tail, None) = last else {
            return None;
        };
        let (future, boxed) = match tail {
            syn::Expr::Async(a) => (a, None),
            syn::Expr::Call(call) if is_box_pin(&call.func) && call.args.len() == 1 => {
                match &call.args[0] {
                    syn::Expr::Async(a) => (a, Some(&*call.func)),
                    _ => return None,
                }
            }
            _ => return None,
        };
        Some(ReturnedFuture {
            before,
            future,
            boxed,
            output: Ret::of_type(output),
        })
    }
}

/// `Box::pin`, `::std::boxed::Box::pin`, ... (async-trait writes
/// `Box::pin`).
fn is_box_pin(func: &syn::Expr) -> bool {
    let syn::Expr::Path(p) = func else {
        return false;
    };
    let segments: Vec<_> = p
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    segments.ends_with(&["Box".to_owned(), "pin".to_owned()])
}

/// `T` of `impl Future<Output = T>` or `Pin<Box<dyn Future<Output = T> + ..>>`.
fn future_output(ty: &Type) -> Option<&Type> {
    let bounds = match ty {
        Type::ImplTrait(t) => &t.bounds,
        Type::TraitObject(t) => &t.bounds,
        Type::Group(g) => return future_output(&g.elem),
        Type::Paren(p) => return future_output(&p.elem),
        Type::Path(p) => {
            // `Pin<Box<X>>`: look inside the one type argument.
            let last = p.path.segments.last()?;
            if last.ident != "Pin" && last.ident != "Box" {
                return None;
            }
            let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            return args.args.iter().find_map(|a| match a {
                syn::GenericArgument::Type(t) => future_output(t),
                _ => None,
            });
        }
        _ => return None,
    };
    bounds.iter().find_map(|b| {
        let syn::TypeParamBound::Trait(t) = b else {
            return None;
        };
        let last = t.path.segments.last()?;
        if last.ident != "Future" {
            return None;
        }
        let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
            return None;
        };
        args.args.iter().find_map(|a| match a {
            syn::GenericArgument::AssocType(at) if at.ident == "Output" => Some(&at.ty),
            _ => None,
        })
    })
}

/// Whether the type's last path segment is `Result` (`Result<T, E>`,
/// `io::Result<T>`, `anyhow::Result<T>`).
fn is_result(ty: &Type) -> bool {
    match ty {
        Type::Group(g) => is_result(&g.elem),
        Type::Paren(p) => is_result(&p.elem),
        Type::Path(p) if p.qself.is_none() => {
            p.path.segments.last().is_some_and(|s| s.ident == "Result")
        }
        _ => false,
    }
}

/// `impl Trait` can't be written in a `let` type.
fn contains_impl(ty: &Type) -> bool {
    struct Finder(bool);
    impl<'ast> Visit<'ast> for Finder {
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.0 = true;
        }
    }
    let mut finder = Finder(false);
    finder.visit_type(ty);
    finder.0
}
