use tch_scope::scoped;

fn main() {
    let d = 1.5f32;
    scoped!(device(d) => {});
}
