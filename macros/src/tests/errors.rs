//! Every error: its message, and that it points at the offending token.
//! This file: the helpers, and the mistakes of a list as a whole (words,
//! separators, the body, repeats, conflicts). Arguments are in `args.rs`,
//! attributes in `attrs.rs`, every word's every mistake in `every_word.rs`.

use proc_macro2::TokenStream;

use super::lex;
use crate::bang::scoped_tokens;
use crate::expand::Flavor;

/// The errors of a failed expansion: (message, line, column), 1-based line
/// and 0-based column within the input as proc-macro2 reports them.
pub(super) fn errors(result: syn::Result<TokenStream>) -> Vec<(String, usize, usize)> {
    let error = match result {
        Ok(tokens) => panic!("expected errors, got {tokens}"),
        Err(e) => e,
    };
    error
        .into_iter()
        .map(|e| {
            let start = e.span().start();
            (e.to_string(), start.line, start.column)
        })
        .collect()
}

pub(super) fn scoped_errors(input: &str) -> Vec<(String, usize, usize)> {
    errors(scoped_tokens(
        Flavor::Scoped,
        lex(&format!("::rt ; {input}")),
    ))
}

/// Where the `nth` (1-based) `token` is in `input`, the way
/// `scoped_errors` reports it (the input follows `::rt ; `).
pub(super) fn at(input: &str, token: &str, nth: usize) -> (usize, usize) {
    let offset = input
        .match_indices(token)
        .nth(nth - 1)
        .unwrap_or_else(|| panic!("`{token}` #{nth} not in {input}"))
        .0;
    (1, "::rt ; ".len() + offset)
}

/// Asserts that `input` fails with exactly the errors `want`, in order:
/// each `(part of its message, token it points at, which of them)`.
pub(super) fn every_mistake(input: &str, want: &[(&str, &str, usize)]) {
    let errors = scoped_errors(input);
    assert_eq!(errors.len(), want.len(), "{input}: {errors:#?}");
    for ((text, line, column), &(message, token, nth)) in errors.iter().zip(want) {
        assert!(
            text.contains(message),
            "{input}:\n  got {text}\n  want {message}"
        );
        assert_eq!(
            (*line, *column),
            at(input, token, nth),
            "{input}: span of {text}"
        );
    }
}

/// Asserts exactly one error, containing `message`, at the `nth` `token`.
pub(super) fn one(input: &str, message: &str, token: &str, nth: usize) {
    let errors = scoped_errors(input);
    assert_eq!(errors.len(), 1, "{input}: {errors:#?}");
    let (text, line, column) = &errors[0];
    assert!(
        text.contains(message),
        "{input}:\n  got {text}\n  want {message}"
    );
    assert_eq!(
        (*line, *column),
        at(input, token, nth),
        "{input}: span of {text}"
    );
}

#[test]
fn unknown_word_suggests_the_closest() {
    one(
        "no_grd => {}",
        "unknown scope word `no_grd`; did you mean `no_grad`?",
        "no_grd",
        1,
    );
    one(
        "inference => {}",
        "did you mean `inference_mode`?",
        "inference",
        1,
    );
    one("devise(0) => {}", "did you mean `device`?", "devise", 1);
}

/// Pins the message's prefix and takes the list from the table, so a new
/// word changes no blessed text. (This case is not a ui case: trybuild
/// pins a whole `.stderr`, list included.)
#[test]
fn unknown_word_far_from_any_lists_the_known_ones() {
    let errors = scoped_errors("banana => {}");
    assert!(!errors[0].0.contains("did you mean"), "{errors:?}");
    one(
        "banana => {}",
        "unknown scope word `banana`; known words: `no_grad`",
        "banana",
        1,
    );
    let prefix = "unknown scope word `banana`; known words: ";
    assert_eq!(
        errors[0].0,
        format!("{prefix}{}", crate::words::known_list())
    );
}

#[test]
fn missing_arrow() {
    one(
        "no_grad { x }",
        "expected `=>` between the scope words and the body: `scoped!(no_grad => { ... })`",
        "{",
        1,
    );
    one(
        "no_grad, device(0)",
        "`scoped!` needs `=>` and a body after the scope words: `scoped!(no_grad => { ... })`",
        "device",
        1,
    );
    one(
        "no_grad x",
        "expected `,` between scope words, or `=>` before the body",
        "x",
        1,
    );
}

#[test]
fn missing_body() {
    one(
        "no_grad =>",
        "expected a body after `=>`: a block `{ ... }` or one expression",
        "=>",
        1,
    );
    one(
        "no_grad => let x = 1",
        "the body after `=>` must be one block `{ ... }` or one expression; \
         put statements in braces: `=> { let ..; }`",
        "let",
        1,
    );
    one(
        "no_grad => { a } { b }",
        "the body after `=>` must be one block `{ ... }` or one expression",
        "{ b }",
        1,
    );
}

#[test]
fn duplicate_word() {
    one(
        "no_grad, device(0), no_grad => {}",
        "`no_grad` appears twice in this list; keep one",
        "no_grad",
        2,
    );
    one(
        "device(0), device(1) => {}",
        "`device` appears twice",
        "device",
        2,
    );
    one(
        "eval(model), no_grad, eval(model) => {}",
        "`eval` appears twice in this list; keep one",
        "eval",
        2,
    );
}

#[test]
fn contradictory_words() {
    one(
        "no_grad, enable_grad => {}",
        "`enable_grad` contradicts `no_grad` earlier in this list; keep one",
        "enable_grad",
        1,
    );
    one(
        "grad(x), inference_mode, no_grad => {}",
        "`no_grad` contradicts `grad` earlier in this list; keep one",
        "no_grad",
        1,
    );
    one(
        "no_grad, eval(model), train(model) => {}",
        "`train(model)` contradicts `eval(model)` earlier in this list; keep one",
        "train",
        1,
    );
    // By name, the model is the same model.
    one(
        "eval(model = m), train(m) => {}",
        "`train(m)` contradicts `eval(m)` earlier in this list; keep one",
        "train",
        1,
    );
    one(
        "train(self.net), eval(self . net) => {}",
        "`eval(self . net)` contradicts `train(self . net)` earlier in this list; keep one",
        "eval",
        1,
    );
}

#[test]
fn allowed_combinations() {
    for list in [
        "inference_mode, no_grad",
        "no_grad, inference_mode",
        "with(a), with(b), with(c)",
        "device(0), with(a), grad(t)",
        // Different models may be in different modes (a GAN step).
        "train(generator), eval(discriminator)",
        "no_grad, eval(a), eval(b)",
    ] {
        let out = scoped_tokens(Flavor::Scoped, lex(&format!("::rt ; {list} => {{}}")));
        assert!(
            out.is_ok(),
            "{list}: {:?}",
            out.err().map(|e| e.to_string())
        );
    }
}

#[test]
fn empty_list() {
    one(
        "=> {}",
        "`scoped!` needs at least one scope word before `=>`",
        "=>",
        1,
    );
    let errors = errors(scoped_tokens(Flavor::TryScoped, lex("::rt ; => {}")));
    assert_eq!(
        errors[0].0,
        "`try_scoped!` needs at least one scope word before `=>`"
    );
}

#[test]
fn not_a_scope_word() {
    one(
        "42 => {}",
        "expected a scope word such as `no_grad` or `device(0)`",
        "42",
        1,
    );
    one(", no_grad => {}", "expected a scope word", ",", 1);
}

#[test]
fn jumps_out_of_an_awaiting_body() {
    let message = "`return` inside a `scoped!` body that `.await`s: the body runs as its own \
                   future so the scopes can be re-entered on every poll, and `return` would \
                   leave only that future. Put the scope on the async fn instead \
                   (`#[no_grad] async fn ...`), or move the `return` out of the scoped body";
    one("no_grad => { x.await; return 1; }", message, "return", 1);
    one(
        "no_grad => { x.await; break; }",
        "`break` inside a `scoped!` body",
        "break",
        1,
    );
    one(
        "no_grad => { x.await; continue }",
        "`continue` inside a `scoped!` body",
        "continue",
        1,
    );
    one(
        "no_grad => { loop { x.await; break 'outer; } }",
        "`break` inside",
        "break",
        1,
    );
    one(
        "no_grad => { while c { x.await } continue 'outer }",
        "`continue` inside",
        "continue",
        1,
    );
    let errors = errors(scoped_tokens(
        Flavor::TryScoped,
        lex("::rt ; no_grad => { if a { return 1; } x.await; if b { return 2; } }"),
    ));
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0]
            .0
            .starts_with("`return` inside a `try_scoped!` body")
    );
}

#[test]
fn question_mark_in_an_awaiting_body() {
    let message = "`?` inside a `scoped!` body that `.await`s: the body runs as its own future \
                   so the scopes can be re-entered on every poll, and `?` would leave only that \
                   future, not the function. Put the scope on the async fn instead";
    one("no_grad => { let y = x.await?; y * 2.0 }", message, "?", 1);
    one(
        "no_grad => { let y = f()?; x.await }",
        "`?` inside a `scoped!`",
        "?",
        1,
    );
    one(
        "no_grad => { if c { g(x.await) } else { h(f()?) } }",
        "`scoped!(no_grad => async { ...?; Ok(v) }.await)?`",
        "?",
        1,
    );
    // Every `?` on its own token; `try_scoped!` names itself.
    let errors = errors(scoped_tokens(
        Flavor::TryScoped,
        lex("::rt ; no_grad => { let a = f()?; x.await; g(a)? }"),
    ));
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[1].0.starts_with("`?` inside a `try_scoped!` body"));
    assert!(errors[1].0.contains("`try_scoped!(no_grad => async {"));
}

#[test]
fn question_mark_in_a_body_that_does_not_await_or_in_a_deadline_is_fine() {
    for input in [
        "no_grad => { let y = f()?; y }",
        "deadline(d) => { let y = f()?; Ok(y) }",
    ] {
        let out = scoped_tokens(Flavor::Scoped, lex(&format!("::rt ; {input}")));
        assert!(
            out.is_ok(),
            "{input}: {:?}",
            out.err().map(|e| e.to_string())
        );
    }
}

#[test]
fn jumps_in_a_body_that_does_not_await_are_fine() {
    for body in [
        "{ return 1; }",
        "{ break; }",
        "{ continue }",
        "{ break 'outer 5; }",
    ] {
        let out = scoped_tokens(Flavor::Scoped, lex(&format!("::rt ; no_grad => {body}")));
        assert!(out.is_ok(), "{body}");
    }
}

#[test]
fn every_mistake_is_reported_at_once() {
    let input = "no_grd, with(a, b), 7, device(\"gpu\"), no_grad(x), no_grad, enable_grad => {}";
    let errors = scoped_errors(input);
    let found: Vec<_> = errors.iter().map(|(_, l, c)| (*l, *c)).collect();
    // Syntax errors come first, then the checks of the parsed items.
    assert_eq!(
        found,
        [
            at(input, "7", 1),
            at(input, "no_grd", 1),
            at(input, "b", 1),
            at(input, "\"gpu\"", 1),
            at(input, "(x)", 1),
            at(input, "no_grad", 2),
            at(input, "enable_grad", 1),
        ],
        "{errors:#?}"
    );
}

#[test]
fn internal_macro_needs_the_runtime_path() {
    for input in ["no_grad => {}", "; no_grad => {}", ""] {
        let errors = errors(scoped_tokens(Flavor::Scoped, lex(input)));
        assert!(
            errors[0].0.contains("use `tch_scope::scoped!`"),
            "{input}: {errors:?}"
        );
    }
}

#[test]
fn failed_expansion_is_a_diverging_block_of_compile_errors() {
    let out = crate::bang::scoped_macro(Flavor::Scoped, lex("::rt ; no_grd => {}")).to_string();
    assert!(out.starts_with("{ :: core :: compile_error !"), "{out}");
    assert!(out.ends_with("loop { } }"), "{out}");
}
