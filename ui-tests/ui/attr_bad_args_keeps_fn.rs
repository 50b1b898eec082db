#[tch_scope::no_grad(true)]
fn predict() -> i32 {
    3
}

fn main() {
    // The function is still emitted: no follow-on error here.
    let _ = predict();
}
