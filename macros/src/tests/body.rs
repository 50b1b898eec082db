//! What the body scanner counts as awaiting.

use crate::body::awaits;

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
