//! Every error: its message, and that it points at the offending token.

use proc_macro2::TokenStream;

use super::lex;
use crate::attr::{Attr, attr_tokens, attribute};
use crate::bang::scoped_tokens;
use crate::expand::Flavor;

/// The errors of a failed expansion: (message, line, column), 1-based line
/// and 0-based column within the input as proc-macro2 reports them.
fn errors(result: syn::Result<TokenStream>) -> Vec<(String, usize, usize)> {
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

fn scoped_errors(input: &str) -> Vec<(String, usize, usize)> {
    errors(scoped_tokens(
        Flavor::Scoped,
        lex(&format!("::rt ; {input}")),
    ))
}

/// Where the `nth` (1-based) `token` is in `input`, the way
/// `scoped_errors` reports it (the input follows `::rt ; `).
fn at(input: &str, token: &str, nth: usize) -> (usize, usize) {
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
fn one(input: &str, message: &str, token: &str, nth: usize) {
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
fn arguments_to_a_word_without_any() {
    one(
        "no_grad(x) => {}",
        "`no_grad` takes no arguments: write `no_grad` without parentheses",
        "(",
        1,
    );
    one(
        "enable_grad() => {}",
        "`enable_grad` takes no arguments",
        "(",
        1,
    );
}

#[test]
fn missing_arguments() {
    one(
        "grad => {}",
        "`grad` needs one argument: write `grad(enabled)`",
        "grad",
        1,
    );
    one(
        "grad() => {}",
        "`grad` needs one argument, found 0: write `grad(enabled)`",
        "(",
        1,
    );
    one(
        "device => {}",
        "`device` needs one argument: write `device(0)`",
        "device",
        1,
    );
    one(
        "with() => {}",
        "`with` needs one argument, found 0: write `with(scope)`",
        "(",
        1,
    );
}

#[test]
fn extra_arguments() {
    one(
        "grad(a, b) => {}",
        "`grad` takes one argument, found 2: write `grad(enabled)`",
        "b",
        1,
    );
    one(
        "device(0, 1) => {}",
        "`device` takes one argument, found 2",
        "1",
        1,
    );
    one(
        "with(a, b, c) => {}",
        "`with` takes one argument, found 3",
        "b",
        1,
    );
}

#[test]
fn named_arguments_to_positional_words() {
    one(
        "grad(enabled = true) => {}",
        "`grad` takes no named arguments: write `grad(enabled)`",
        "enabled",
        1,
    );
}

#[test]
fn malformed_arguments() {
    one("grad(a b) => {}", "expected `,` between arguments", "b", 1);
    one(
        "device(cuda:0) => {}",
        "unexpected `:`; a device string needs quotes, e.g. `device(\"cuda:0\")`",
        ":",
        1,
    );
}

#[test]
fn bad_device_strings() {
    let forms = "write a CUDA index such as `device(0)`, `device(cpu)`, a device string \"cpu\", \
                 \"mps\" or \"cuda:N\" (N a non-negative integer, e.g. \"cuda:0\"), or an \
                 expression of a device type";
    one(
        "device(\"gpu\") => {}",
        &format!("unknown device string \"gpu\": {forms}"),
        "\"gpu\"",
        1,
    );
    for bad in [
        "cuda:",
        "cuda:-1",
        "cuda:+1",
        "cuda: 0",
        "CUDA:0",
        "cuda:0x1",
        "cuda:99999999999999999999999",
    ] {
        let input = format!("device(\"{bad}\") => {{}}");
        one(&input, "unknown device string", "\"", 1);
    }
}

#[test]
fn cuda_without_an_index() {
    let message = "write `device(0)` or `device(\"cuda:0\")`: the CUDA device needs an index";
    one("device(cuda) => {}", message, "cuda", 1);
    one("device(\"cuda\") => {}", message, "\"cuda\"", 1);
}

#[test]
fn negative_and_non_integer_devices() {
    one(
        "device(-1) => {}",
        "a device index can't be negative: write `device(0)` for the first CUDA device",
        "-",
        1,
    );
    one("device(-(2)) => {}", "can't be negative", "-", 1);
    for lit in ["1.5", "true", "'c'", "b\"x\"", "0f32", "1e3"] {
        one(
            &format!("device({lit}) => {{}}"),
            "this literal is not a device: write a CUDA index such as `device(0)`",
            lit,
            1,
        );
    }
    one(
        "device(99999999999999999999999) => {}",
        "this device index doesn't fit in a `usize`",
        "9",
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
    one(
        "train(self.net), eval(self . net) => {}",
        "`eval(self . net)` contradicts `train(self . net)` earlier in this list; keep one",
        "eval",
        1,
    );
}

#[test]
fn model_words_need_a_model() {
    one(
        "eval => {}",
        "`eval` needs one argument: write `eval(model)`",
        "eval",
        1,
    );
    one(
        "train(a, b) => {}",
        "`train` takes one argument, found 2: write `train(model)`",
        "b",
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

// ---- attributes ----

fn attr_errors(attr: Attr, args: &str, item: &str) -> Vec<(String, usize, usize)> {
    errors(attr_tokens(attr, lex(args), lex(item)))
}

/// (line, column) of the first `token` in `src`.
fn pos(src: &str, token: &str) -> (usize, usize) {
    let offset = src
        .find(token)
        .unwrap_or_else(|| panic!("`{token}` not in {src}"));
    let line = src[..offset].matches('\n').count() + 1;
    let column = offset - src[..offset].rfind('\n').map_or(0, |n| n + 1);
    (line, column)
}

fn one_attr(attr: Attr, args: &str, item: &str, message: &str, span: (usize, usize)) {
    let errors = attr_errors(attr, args, item);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let (text, line, column) = &errors[0];
    assert!(text.contains(message), "got {text}\nwant {message}");
    assert_eq!((*line, *column), span, "span of {text}");
}

#[test]
fn attribute_on_something_else_than_a_fn() {
    for item in [
        "struct S;",
        "pub(crate) const X: u8 = 1;",
        "impl S { fn f() {} }",
        "mod m {}",
        "extern crate c;",
    ] {
        let skip_vis = item.trim_start_matches("pub(crate) ");
        let keyword = skip_vis.split_whitespace().next().unwrap();
        one_attr(
            Attr::Word("no_grad"),
            "",
            item,
            "`#[no_grad]` goes on a function (`fn`); for a block of code use \
             `scoped!(no_grad => { ... })`",
            pos(item, keyword),
        );
    }
    let item = "fn f();";
    one_attr(
        Attr::Word("device"),
        "0",
        "struct S;",
        "`#[device(..)]` goes on a function (`fn`); for a block of code use \
         `scoped!(device(0) => { ... })`",
        (1, 0),
    );
    one_attr(
        Attr::Word("device"),
        "0",
        item,
        "`#[device(..)]` needs a function body",
        pos(item, ";"),
    );
    let item = "#[derive(Debug)]\nenum E {}";
    one_attr(
        Attr::List,
        "no_grad",
        item,
        "`#[scope(..)]` goes on a function",
        pos(item, "enum"),
    );
}

#[test]
fn const_fn() {
    let item = "pub const unsafe fn f() -> u8 { 1 }";
    one_attr(
        Attr::Word("inference_mode"),
        "",
        item,
        "`#[inference_mode]` can't go on a `const fn`: scopes change thread state at run time, \
         which a `const fn` cannot do; remove `const` or call a scoped helper",
        pos(item, "const"),
    );
}

#[test]
fn trait_method_without_body() {
    let item = "fn forward(&self, x: &Tensor) -> Tensor;";
    one_attr(
        Attr::Word("no_grad"),
        "",
        item,
        "`#[no_grad]` needs a function body: on a trait method without a default body, put it \
         on the implementations instead",
        pos(item, ";"),
    );
}

#[test]
fn attribute_arguments_are_checked_like_scoped() {
    let item = "fn f() {}";
    one_attr(
        Attr::Word("no_grad"),
        "x",
        item,
        "`no_grad` takes no arguments",
        pos("x", "x"),
    );
    one_attr(
        Attr::Word("grad"),
        "",
        item,
        "`grad` needs one argument: write `grad(enabled)`",
        (1, 0),
    );
    one_attr(
        Attr::Word("device"),
        "-1",
        item,
        "can't be negative",
        (1, 0),
    );
    one_attr(
        Attr::Word("device"),
        "\"gpu\"",
        item,
        "unknown device string",
        (1, 0),
    );
    one_attr(
        Attr::Word("with"),
        "a, b",
        item,
        "`with` takes one argument, found 2",
        pos("a, b", "b"),
    );
    one_attr(
        Attr::List,
        "no_grad, enable_grad",
        item,
        "`enable_grad` contradicts `no_grad` earlier in this list; keep one",
        pos("no_grad, enable_grad", "enable_grad"),
    );
    one_attr(
        Attr::List,
        "",
        item,
        "`#[scope]` needs at least one scope word: `#[scope(no_grad)]`",
        (1, 0),
    );
    one_attr(
        Attr::List,
        "no_grad device(0)",
        item,
        "expected `,` between scope words",
        pos("no_grad device(0)", "device"),
    );
}

#[test]
fn conditions_work_in_scoped_attribute() {
    let out = attr_tokens(Attr::List, lex("no_grad if !training"), lex("fn f() {}"))
        .unwrap()
        .to_string();
    assert!(
        out.contains("when (! training , :: tch_scope :: __private :: no_grad ())"),
        "{out}"
    );
}

#[test]
fn argument_and_item_errors_are_reported_together() {
    let errors = attr_errors(Attr::List, "no_grd", "const fn f();");
    let messages: Vec<_> = errors.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert!(messages[0].starts_with("unknown scope word `no_grd`"));
    assert!(messages[1].contains("`const fn`"));
    assert!(messages[2].contains("needs a function body"));
}

#[test]
fn failed_attribute_reemits_the_function_unchanged() {
    let item = "/// Doc.\npub fn f(x: u8) -> u8 { x }";
    let out = attribute(Attr::Word("device"), lex("\"gpu\""), lex(item)).to_string();
    let original = lex(item).to_string();
    assert!(out.starts_with(&original), "{out}");
    assert!(
        out[original.len()..]
            .trim_start()
            .starts_with(":: core :: compile_error !"),
        "{out}"
    );
}

/// `checkpoint` reads its row's params: every mistake, each on its token.
#[test]
fn checkpoint_reports_every_mistake() {
    every_mistake(
        "checkpoint(vs, p, restart, resume, resume = b, save_on_failur = false) => {}",
        &[
            ("unexpected argument to `checkpoint`: write", "restart", 1),
            (
                "`resume` is given twice to `checkpoint`; keep one",
                "resume",
                2,
            ),
            (
                "`checkpoint` has no argument `save_on_failur` (did you mean `save_on_failure`?)",
                "save_on_failur",
                1,
            ),
        ],
    );
    one(
        "checkpoint(vs) => {}",
        "`checkpoint` needs its `path` argument: write `checkpoint(vs, \"model.ot\", resume, save_on_failure = false)`",
        "(",
        1,
    );
}

/// A bare word after a named one is a misspelt flag, not a second value
/// for the param at its position.
#[test]
fn misspelt_flag_after_a_named_argument() {
    every_mistake(
        "timed(name = \"fwd\", synced) => {}",
        &[(
            "`timed` has no argument `synced` (did you mean `sync`?)",
            "synced",
            1,
        )],
    );
    every_mistake(
        "checkpoint(vs, p, resum) => {}",
        &[(
            "`checkpoint` has no argument `resum` (did you mean `resume`?)",
            "resum",
            1,
        )],
    );
    every_mistake(
        "timed(name = \"fwd\", \"again\") => {}",
        &[("`name` is given twice to `timed`; keep one", "\"again\"", 1)],
    );
}
