use tch_scope::{NoGrad, ScopeStack};

fn main() {
    let mut stack = ScopeStack::new();
    stack.enter(NoGrad).unwrap();
    std::thread::spawn(move || drop(stack));
}
