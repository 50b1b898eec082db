//! Compile-fail cases: every `ui/*.rs` must fail to build with exactly the
//! diagnostics in its `.stderr`. Bless with `TRYBUILD=overwrite`, then read
//! every changed `.stderr`: it is user-facing text.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/*.rs");
}
