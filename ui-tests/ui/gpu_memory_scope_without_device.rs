#[tch_scope::gpu_memory_scope(empty_cache = false)]
fn forward() {}

fn main() {
    forward();
}
