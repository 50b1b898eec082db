use tch_scope::scoped;

fn main() {
    let rank: i32 = 0;
    scoped!(distributed(rank = rank, world_size = 2, master = "127.0.0.1:29500") => {});
}
