#[tch_scope::timed(name = "fwd", synced)]
fn forward() {}

fn main() {
    forward();
}
