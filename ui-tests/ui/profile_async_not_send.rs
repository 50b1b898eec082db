// `profile` profiles the thread that started it: a future holding it for
// its whole life can't move between threads (see `ProfileGuard`).
use tch_scope::scope;

fn spawn<F: std::future::Future + Send>(_: F) {}

#[scope(profile("trace.json"), no_grad)]
async fn handler() {}

fn main() {
    spawn(handler());
}
