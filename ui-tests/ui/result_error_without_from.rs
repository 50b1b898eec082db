#[tch_scope::device(0)]
fn predict() -> Result<i32, String> {
    Ok(3)
}

fn main() {
    let _ = predict();
}
