#[tch_scope::scope(no_grad, devise(0))]
fn predict() -> i32 {
    3
}

fn main() {
    let _ = predict();
}
