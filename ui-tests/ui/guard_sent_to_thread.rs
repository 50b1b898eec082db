use tch_scope::{NoGrad, Scope};

fn main() {
    let guard = NoGrad.enter().unwrap();
    std::thread::spawn(move || drop(guard));
}
