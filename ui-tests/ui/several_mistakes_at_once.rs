use tch_scope::scoped;

fn main() {
    scoped!(inferense_mode, device("cuda:x"), enable_grad(1) => {});
}
