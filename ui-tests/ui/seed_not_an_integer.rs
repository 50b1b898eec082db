// A seed is an integer of at most 64 bits, as `torch.manual_seed` takes it.
use tch_scope::scoped;

fn a_float_literal() {
    scoped!(seed(1.5) => {});
}

fn a_float_variable(lr: f64) {
    scoped!(seed(lr) => {});
}

#[tch_scope::seed(0.5)]
fn an_attribute_with_a_float() {}

fn a_wider_integer(n: u128) {
    scoped!(seed(n) => {});
}

fn main() {
    a_float_literal();
    a_float_variable(0.1);
    an_attribute_with_a_float();
    a_wider_integer(7);
}
