use tch_scope::scoped;

fn main() {
    let _x: () = scoped!(no_grad =>);
}
