#[tch_scope::no_grad]
struct Model;

fn main() {}
