use tch_scope::scoped;

fn main() {
    scoped!(grad(1) => {});
}
