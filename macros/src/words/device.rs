//! `device(..)`: a CUDA index, `cpu`, `mps`, a device string or a runtime
//! value; literals are checked now, anything else at run time.

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::{Expr, ExprLit, ExprUnary, Lit, UnOp};

use crate::errors::Errors;
use crate::expand::cx::Cx;
use crate::word::Checked;

const DEVICE_FORMS: &str = "write a CUDA index such as `device(0)`, `device(cpu)`, \
    a device string \"cpu\", \"mps\" or \"cuda:N\" (N a non-negative integer, e.g. \"cuda:0\"), \
    or an expression of a device type";

const CUDA_NEEDS_INDEX: &str =
    "write `device(0)` or `device(\"cuda:0\")`: the CUDA device needs an index";

/// A literal device is checked now; anything else at run time.
pub(crate) fn check(checked: &Checked, errors: &mut Errors) {
    if let Some(expr) = checked.value("device")
        && let Err(e) = device(expr)
    {
        errors.push(e);
    }
}

pub(crate) fn build(checked: &Checked, cx: &Cx) -> TokenStream {
    let expr = checked
        .value("device")
        .expect("`read` reports a missing device");
    let span = checked.span;
    let private = cx.private(span);
    // `check` has refused what `device` refuses.
    match device(expr).unwrap_or(Device::Expr) {
        Device::Cpu => quote_spanned!(span=> #private::device_cpu()),
        Device::Mps => quote_spanned!(span=> #private::device_mps()),
        Device::Cuda(index, lit_span) => {
            let mut index = proc_macro2::Literal::usize_suffixed(index);
            index.set_span(lit_span);
            quote_spanned!(span=> #private::device_cuda(#index))
        }
        Device::Expr => quote_spanned!(span=> #private::device(#expr)),
    }
}

enum Device {
    Cpu,
    Mps,
    Cuda(usize, proc_macro2::Span),
    /// A runtime value, converted by `__private::device`.
    Expr,
}

fn device(expr: &Expr) -> syn::Result<Device> {
    match peel(expr) {
        Expr::Lit(ExprLit { lit, .. }) => device_lit(lit),
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr: inner,
            ..
        }) if matches!(peel(inner), Expr::Lit(_)) => Err(syn::Error::new_spanned(
            expr,
            "a device index can't be negative: write `device(0)` for the first CUDA device",
        )),
        Expr::Path(path) if path.qself.is_none() && path.attrs.is_empty() => {
            match path.path.get_ident().map(ToString::to_string).as_deref() {
                Some("cpu") => Ok(Device::Cpu),
                Some("mps") => Ok(Device::Mps),
                Some("cuda") => Err(syn::Error::new_spanned(path, CUDA_NEEDS_INDEX)),
                _ => Ok(Device::Expr),
            }
        }
        _ => Ok(Device::Expr),
    }
}

/// Looks through parentheses and the invisible groups of `$e:expr`.
fn peel(mut expr: &Expr) -> &Expr {
    loop {
        match expr {
            Expr::Paren(p) => expr = &p.expr,
            Expr::Group(g) => expr = &g.expr,
            _ => return expr,
        }
    }
}

fn device_lit(lit: &Lit) -> syn::Result<Device> {
    match lit {
        Lit::Int(int) if !INT_SUFFIXES.contains(&int.suffix()) => Err(syn::Error::new(
            int.span(),
            format!("this literal is not a device: {DEVICE_FORMS}"),
        )),
        Lit::Int(int) => {
            let index = int.base10_parse::<usize>().map_err(|_| {
                syn::Error::new(int.span(), "this device index doesn't fit in a `usize`")
            })?;
            Ok(Device::Cuda(index, int.span()))
        }
        Lit::Str(s) => match s.value().as_str() {
            "cpu" => Ok(Device::Cpu),
            "mps" => Ok(Device::Mps),
            "cuda" => Err(syn::Error::new(s.span(), CUDA_NEEDS_INDEX)),
            other => match cuda_index(other) {
                Some(index) => Ok(Device::Cuda(index, s.span())),
                None => Err(syn::Error::new(
                    s.span(),
                    format!("unknown device string {other:?}: {DEVICE_FORMS}"),
                )),
            },
        },
        _ => Err(syn::Error::new(
            lit.span(),
            format!("this literal is not a device: {DEVICE_FORMS}"),
        )),
    }
}

const INT_SUFFIXES: &[&str] = &[
    "", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize",
];

/// `"cuda:N"` with N all ASCII digits (so no `+1`, no spaces).
fn cuda_index(s: &str) -> Option<usize> {
    let digits = s.strip_prefix("cuda:")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
