//! What the body scanner counts as awaiting.

use crate::body::{awaits, may_hide_await};

fn scan(src: &str) -> bool {
    let expr: syn::Expr = syn::parse_str(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    awaits(&expr)
}

#[test]
fn joining_and_selecting_macros_count_as_awaits() {
    for src in [
        "{ tokio::join!(a, b) }",
        "{ futures::join!(a, b) }",
        "{ join!(a, b) }",
        "{ let (x, y) = tokio::try_join!(a, b)?; x + y }",
        "{ tokio::select! { v = a => v, w = b => w } }",
        "{ futures::select_biased! { v = a => v, complete => 0 } }",
        "{ select!(a, b) }",
    ] {
        assert!(scan(src), "{src} should await");
    }
}

#[test]
fn other_macros_and_inner_futures_do_not() {
    for src in [
        "{ println!(\"{}\", x) }",
        "{ vec![join(a, b)] }",
        "{ my::joined!(a) }",
        "{ async { tokio::join!(a, b) } }",
        "{ || async { x.await } }",
    ] {
        assert!(!scan(src), "{src} should not await");
    }
}

#[test]
fn a_visible_await_marks_a_body_with_a_hidden_one() {
    // The documented way for a macro the scanner can't see into.
    assert!(scan("{ async { my_join!(a, b) }.await }"));
    assert!(!scan("{ my_join!(a, b) }"));
}

fn hides(src: &str) -> bool {
    let expr: syn::Expr = syn::parse_str(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    may_hide_await(&expr)
}

#[test]
fn a_call_of_an_unknown_macro_may_hide_an_await() {
    for src in [
        "{ settle!(fut) }",
        "{ let x = my::settle!(fut); x + 1 }",
        "{ println!(\"{}\", settle!(fut)) }",
        "{ assert!(vec![my!(a)].is_empty()) }",
        "{ if c { a } else { tch::kind!(x) } }",
    ] {
        assert!(hides(src), "{src} may hide an await");
    }
}

#[test]
fn std_and_logging_macros_closures_and_async_blocks_do_not() {
    for src in [
        "{ println!(\"{x:?}\"); vec![a, b] }",
        "{ assert!(a != b, \"{}\", !c); tracing::info!(n = 1, \"x\"); format!(\"{a}\") }",
        "{ let f = || settle!(fut); f() }",
        "{ let f = async { settle!(fut) }; f }",
        "{ fn g() { settle!(fut) } g() }",
        "{ model.forward(&x) }",
    ] {
        assert!(!hides(src), "{src} cannot hide an await");
    }
}
