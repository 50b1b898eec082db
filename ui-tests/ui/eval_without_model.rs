use tch_scope::scoped;

fn main() {
    scoped!(no_grad, eval => {});
}
