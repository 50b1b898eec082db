//! The attributes' own mistakes (on something that is not a function, a
//! `const fn`, no body) and their arguments, checked like `scoped!`'s.

use super::errors::errors;
use super::lex;
use crate::attr::{Attr, attr_tokens, attribute};

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
        "`grad` needs its `enabled` argument: write `grad(enabled)`",
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
