//! Calls the renamed-dependency functions and checks what they saw.

use std::task::{Context, Poll, Waker};

use tch_scope_renamed_tests::{renamed_async, renamed_device, renamed_list, renamed_word};

#[test]
fn attributes_work_under_a_renamed_dependency() {
    assert!(!renamed_word().unwrap());
    assert!(!renamed_list());
    assert_eq!(renamed_device().unwrap(), tch::Device::Cpu);
    assert_eq!(ts::report().timing("renamed::list").unwrap().count, 1);
    let mut fut = std::pin::pin!(renamed_async());
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(false));
    assert!(!ts::scoped!(no_grad => ts::is_grad_enabled()));
    assert!(ts::is_grad_enabled());
}
