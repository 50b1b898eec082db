use tch_scope::eval;

#[eval(steps)]
fn validate(steps: &mut Vec<f32>) -> usize {
    steps.len()
}

fn main() {
    validate(&mut Vec::new());
}
