//! Unit tests: the expansion engine is crate-internal (a proc-macro crate
//! can export only macros), so it is tested from here.

mod args;
mod attrs;
mod autocast;
mod body;
mod by_name;
mod distributed;
mod errors;
mod every_word;
mod expansion;
mod fuzz;
mod sdpa;
mod table;

use proc_macro2::TokenStream;

/// Lexes test input; the inputs are fixed strings that always lex.
fn lex(src: &str) -> TokenStream {
    src.parse()
        .unwrap_or_else(|e| panic!("test input doesn't lex: {e:?}: {src}"))
}
