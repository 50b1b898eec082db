use tch::Tensor;

#[tch_scope::recompute]
fn norm(x: &Tensor) -> f64 {
    x.norm().double_value(&[])
}

#[tch_scope::recompute]
fn nothing(x: &Tensor) {
    let _ = x.relu();
}

fn main() {
    let x = Tensor::ones([2], (tch::Kind::Float, tch::Device::Cpu));
    let _: f64 = norm(&x);
    nothing(&x);
}
