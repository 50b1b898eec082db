//! Code generation: checked scopes and a body in, tokens out.
//!
//! - `block.rs`: `scoped!` / `try_scoped!` blocks ([`flat`], [`try_flat`],
//!   [`awaiting`]);
//! - `fn_body.rs`: an attributed function's new body, one output shape
//!   per kind of function ([`fn_body`]);
//! - `returns.rs`: what the signature says (the return type, whether it
//!   is a `Result`, the future a function returns);
//! - `parts.rs`: what they share (guards, scope values, outcome marks);
//! - `cx.rs`: the context (the runtime's path, the default measurement
//!   name), the one part of expansion the rows' build halves see.
//!
//! Every path is absolute (`RT::__private::..`, `::core::..`) so nothing in
//! the caller's scope (a `mod core`, a `Result` alias) can capture it, and
//! every local is `Span::mixed_site()` so the body can't see it.

mod block;
pub(crate) mod cx;
mod fn_body;
mod parts;
mod returns;

pub(crate) use block::{Flavor, awaiting, flat, try_flat};
pub(crate) use fn_body::fn_body;
