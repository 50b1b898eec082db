#[tch_scope::no_grad]
const fn three() -> i32 {
    3
}

fn main() {
    // The function is still emitted: no follow-on error here.
    let _ = three();
}
