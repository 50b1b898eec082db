use tch_scope::scoped;

fn main() {
    scoped!(timed("fwd", sync = 1) => {});
}
