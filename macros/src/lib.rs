//! Procedural macros of [tch-scope]: the scope attributes and the engine of
//! `scoped!` / `try_scoped!`.
//!
//! Use them through `tch_scope`, which re-exports them with the full user
//! documentation and runnable examples; the generated code calls into
//! `tch_scope::__private`.
//!
//! Every attribute and `scoped!` share one grammar, a comma-separated list of
//! scope words, each optionally with arguments and an `if` condition:
//! `no_grad`, `enable_grad`, `grad(enabled)`, `inference_mode`,
//! `device(0)` / `device(cpu)` / `device("cuda:1")` / `device(expr)`,
//! `eval(model)`, `train(model)`, `with(scope)`. The first word listed is the outermost scope.
//!
//! [tch-scope]: https://docs.rs/tch-scope

mod ast;
mod attr;
mod bang;
mod body;
mod expand;
mod valid;
mod words;

#[cfg(test)]
mod tests;

use attr::Attr;
use bang::Flavor;
use proc_macro::TokenStream;

/// Runs the function with autograd off, like `torch.no_grad()`.
///
/// `#[no_grad] fn f(..) { .. }` enters the scope at the start of every call
/// and leaves it when the call returns; on an `async fn` the scope is
/// re-entered on every poll. Runnable examples are in `tch_scope`'s docs.
#[proc_macro_attribute]
pub fn no_grad(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("no_grad"), args.into(), item.into()).into()
}

/// Runs the function with autograd on, like `torch.enable_grad()`.
#[proc_macro_attribute]
pub fn enable_grad(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("enable_grad"), args.into(), item.into()).into()
}

/// Runs the function with autograd on or off as a `bool` expression says,
/// like `torch.set_grad_enabled(enabled)`: `#[grad(training)]`.
#[proc_macro_attribute]
pub fn grad(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("grad"), args.into(), item.into()).into()
}

/// Runs the function in inference mode, like `torch.inference_mode()`.
#[proc_macro_attribute]
pub fn inference_mode(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("inference_mode"), args.into(), item.into()).into()
}

/// Runs the function with a default device: `#[device(0)]` (CUDA device 0),
/// `#[device(cpu)]`, `#[device("cuda:1")]`, `#[device("mps")]`, or any
/// expression of a device type. Literals are checked at compile time.
#[proc_macro_attribute]
pub fn device(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("device"), args.into(), item.into()).into()
}

/// Runs the function with a model in eval mode, putting back its previous
/// modes (every submodule's) when the call returns: `#[eval(model)]` names a
/// parameter (or any expression) whose type implements
/// `tch_scope::Trainable`. The scope borrows the model (shared) for the call.
/// Does not turn autograd off: add `#[no_grad]`, or `#[scope(no_grad,
/// eval(model))]`.
#[proc_macro_attribute]
pub fn eval(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("eval"), args.into(), item.into()).into()
}

/// Runs the function with a model in training mode, putting back its
/// previous modes when the call returns: `#[train(model)]`.
#[proc_macro_attribute]
pub fn train(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("train"), args.into(), item.into()).into()
}

/// Runs the function inside any value implementing `tch_scope::Scope`:
/// `#[with(my_scope())]`.
#[proc_macro_attribute]
pub fn with(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::Word("with"), args.into(), item.into()).into()
}

/// Runs the function inside a list of scopes, outermost first:
/// `#[scope(device(0), no_grad)]`; a word may carry a condition,
/// `#[scope(no_grad if !training)]`.
///
/// tch-scope re-exports it as `scope`: an attribute can't share a name with
/// the `scoped!` macro.
#[proc_macro_attribute]
pub fn scoped(args: TokenStream, item: TokenStream) -> TokenStream {
    attr::attribute(Attr::List, args.into(), item.into()).into()
}

/// The engine of `tch_scope::scoped!`, which passes its own path first:
/// `scoped_impl!{ $crate ; LIST => BODY }`.
#[doc(hidden)]
#[proc_macro]
pub fn scoped_impl(input: TokenStream) -> TokenStream {
    bang::scoped_macro(Flavor::Scoped, input.into()).into()
}

/// The engine of `tch_scope::try_scoped!`: like `scoped_impl!`, but the
/// value is a `Result` whose `Err` is a scope that could not be entered.
#[doc(hidden)]
#[proc_macro]
pub fn try_scoped_impl(input: TokenStream) -> TokenStream {
    bang::scoped_macro(Flavor::TryScoped, input.into()).into()
}
