#[tch_scope::autocast]
fn forward() {}

fn main() {
    forward();
}
