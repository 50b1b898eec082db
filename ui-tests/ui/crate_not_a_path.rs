// `crate = "…"` names tch-scope's path for a renamed dependency.
#[tch_scope::no_grad(crate = "not a path")]
fn a() {}

#[tch_scope::scope(no_grad, crate = tch_scope)]
fn b() {}

#[tch_scope::device(0, crate = "tch_scope", crate = "tch_scope")]
fn c() {}

fn main() {
    a();
    b();
    c();
}
