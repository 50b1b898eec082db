trait Model {
    #[tch_scope::no_grad]
    fn forward(&self) -> i32;
}

fn main() {}
