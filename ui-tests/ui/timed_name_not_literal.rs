use tch_scope::scoped;

fn main() {
    let name = "fwd";
    scoped!(timed(name) => {});
}
