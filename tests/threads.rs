//! Per-thread state: a thread spawned inside a scope starts fresh, as in
//! PyTorch (`threading.Thread` inside `torch.no_grad()` sees grad enabled).

use tch_scope::scoped;

use crate::util::{fresh, state};

#[test]
fn spawned_thread_starts_with_grad_enabled() {
    let inside = scoped!(no_grad, inference_mode, device(cpu) => {
        std::thread::spawn(state).join().unwrap()
    });
    assert_eq!(inside, fresh());
}

#[test]
fn threads_do_not_see_each_others_scopes() {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    let b = barrier.clone();
    let other = std::thread::spawn(move || {
        scoped!(no_grad => {
            b.wait(); // main thread now checks its own grad mode
            b.wait();
            tch_scope::is_grad_enabled()
        })
    });
    barrier.wait();
    assert!(tch_scope::is_grad_enabled());
    barrier.wait();
    assert!(!other.join().unwrap());
    assert_eq!(state(), fresh());
}
