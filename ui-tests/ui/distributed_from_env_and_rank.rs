#[tch_scope::distributed(from_env, rank = 1, master = "127.0.0.1:29500")]
fn worker() {}

fn main() {
    worker();
}
