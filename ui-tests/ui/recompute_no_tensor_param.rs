use tch::Tensor;

#[tch_scope::recompute]
fn scale(factor: f64, n: i64) -> Tensor {
    Tensor::ones([n], (tch::Kind::Float, tch::Device::Cpu)) * factor
}

fn main() {
    // The function is still emitted: no follow-on error here.
    let _ = scale(2.0, 3);
}
