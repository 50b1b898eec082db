use tch_scope::scoped;

struct Net;

fn main() {
    let net = Net;
    scoped!(no_grad, eval(net) => {});
}
