use tch_scope::scoped;

fn main() {
    let training = 1;
    scoped!(no_grad if training => {});
}
