use tch_scope::scoped;

fn main() {
    scoped!(banana => {});
}
