use tch_scope::{WithMode, scoped};

fn main() {
    let model = WithMode::new(tch::nn::func(|x| x.relu()));
    scoped!(eval(model), train(model) => {});
}
