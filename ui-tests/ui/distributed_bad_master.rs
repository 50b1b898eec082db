use tch_scope::scoped;

fn main() {
    scoped!(distributed(rank = 0, world_size = 2, master = "localhost") => {});
}
