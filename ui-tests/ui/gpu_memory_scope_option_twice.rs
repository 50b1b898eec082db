use tch_scope::scoped;

fn main() {
    scoped!(gpu_memory_scope(device = 0, device = 1) => {});
}
