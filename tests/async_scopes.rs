//! Async: scopes are entered on every poll and left when the poll returns,
//! so grad mode never leaks into another task on the same thread, nor is
//! lost when a task moves threads.

use std::pin::pin;
use std::task::Poll;

use tch_scope::{NoGrad, ScopeFutureExt, no_grad, scoped};

use crate::util::{YieldOnce, block_on, fresh, poll_once, state};

#[no_grad]
async fn grad_before_and_after_a_suspension() -> (bool, bool) {
    let before = tch_scope::is_grad_enabled();
    YieldOnce::default().await;
    (before, tch_scope::is_grad_enabled())
}

async fn plain_task() -> bool {
    YieldOnce::default().await;
    tch_scope::is_grad_enabled()
}

#[test]
fn interleaved_futures_on_one_thread_do_not_leak() {
    let mut a = pin!(grad_before_and_after_a_suspension());
    let mut b = pin!(plain_task());
    // a: enters no_grad, runs to its suspension, leaves no_grad.
    assert!(poll_once(a.as_mut()).is_pending());
    assert_eq!(state(), fresh(), "no_grad leaked out of a pending poll");
    // b runs between a's polls and must see grad on.
    assert!(poll_once(b.as_mut()).is_pending());
    assert_eq!(poll_once(b.as_mut()), Poll::Ready(true));
    // a resumes: no_grad again on both sides of the await.
    assert_eq!(poll_once(a.as_mut()), Poll::Ready((false, false)));
    assert_eq!(state(), fresh());
}

#[test]
fn scoped_block_with_await_reenters_on_every_poll() {
    let task = async {
        scoped!(no_grad, inference_mode => {
            let before = (tch_scope::is_grad_enabled(), tch_scope::is_inference_mode_enabled());
            YieldOnce::default().await;
            let after = (tch_scope::is_grad_enabled(), tch_scope::is_inference_mode_enabled());
            (before, after)
        })
    };
    let mut task = pin!(task);
    assert!(poll_once(task.as_mut()).is_pending());
    assert_eq!(state(), fresh());
    assert_eq!(
        poll_once(task.as_mut()),
        Poll::Ready(((false, true), (false, true)))
    );
    assert_eq!(state(), fresh());
}

/// `?` directly in an awaiting body is a compile error (it would leave
/// only the body's future); written in an async block of the body, the
/// block's value carries the error out, and a `?` after the macro acts on
/// the function — what the error message recommends.
#[test]
fn question_mark_in_an_async_block_of_an_awaiting_body() {
    async fn parse_after_a_suspension(s: &str) -> Result<(i32, bool), std::num::ParseIntError> {
        let n = scoped!(no_grad => async {
            YieldOnce::default().await;
            let n: i32 = s.parse()?;
            Ok::<_, std::num::ParseIntError>(n)
        }.await)?;
        Ok((n, tch_scope::is_grad_enabled()))
    }
    assert!(block_on(parse_after_a_suspension("x")).is_err());
    assert_eq!(block_on(parse_after_a_suspension("7")), Ok((7, true)));
    assert_eq!(state(), fresh());
}

#[test]
fn task_moving_threads_keeps_its_scope() {
    let mut fut = Box::pin(grad_before_and_after_a_suspension().in_scope(NoGrad));
    assert!(poll_once(fut.as_mut()).is_pending());
    // Resume on another thread: the scope is entered there for the poll.
    let out = std::thread::spawn(move || block_on(fut)).join().unwrap();
    // `NoGrad` cannot fail to enter: the value itself, nothing to unwrap.
    assert_eq!(out, (false, false));
    assert_eq!(state(), fresh());
}

#[test]
fn panic_inside_a_poll_restores() {
    let fut = async {
        scoped!(no_grad => {
            YieldOnce::default().await;
            panic!("inside poll");
        })
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| block_on(fut)));
    assert!(r.is_err());
    assert_eq!(state(), fresh());
}

// ---- words that span the whole future --------------------------------------------

#[tch_scope::timed("integration::async::three_suspensions")]
async fn three_suspensions() -> bool {
    for _ in 0..3 {
        YieldOnce::default().await;
    }
    tch_scope::is_grad_enabled()
}

#[test]
fn timed_async_fn_records_once_per_call_not_per_poll() {
    let name = "integration::async::three_suspensions";
    let before = tch_scope::report().timing(name).map_or(0, |t| t.count);
    let mut fut = pin!(three_suspensions());
    for _ in 0..3 {
        assert!(poll_once(fut.as_mut()).is_pending());
    }
    assert_eq!(
        tch_scope::report().timing(name).map_or(0, |t| t.count),
        before,
        "nothing recorded while the future is pending"
    );
    assert_eq!(poll_once(fut.as_mut()), Poll::Ready(true));
    assert_eq!(tch_scope::report().timing(name).unwrap().count, before + 1);
}

/// `in_scopes` by hand: `NoGrad` around each poll, `Timed` once for the
/// whole future.
#[test]
fn in_scopes_by_hand_enters_each_poll_and_times_the_whole_future() {
    let name = "integration::async::in_scopes";
    let fut = async {
        let before = tch_scope::is_grad_enabled();
        YieldOnce::default().await;
        (before, tch_scope::is_grad_enabled())
    };
    let mut fut = pin!(fut.in_scopes(NoGrad, tch_scope::Timed::new(name)));
    assert!(poll_once(fut.as_mut()).is_pending());
    assert_eq!(state(), fresh());
    assert_eq!(poll_once(fut.as_mut()), Poll::Ready(Ok((false, false))));
    assert_eq!(state(), fresh());
    assert_eq!(tch_scope::report().timing(name).unwrap().count, 1);
}

#[test]
fn a_cancelled_timed_future_records_once_when_dropped() {
    let name = "integration::async::cancelled";
    let count = || tch_scope::report().timing(name).map_or(0, |t| t.count);
    let before = count();
    let mut task = Box::pin(async {
        scoped!(no_grad, timed("integration::async::cancelled") => YieldOnce::default().await)
    });
    assert!(poll_once(task.as_mut()).is_pending());
    assert_eq!(state(), fresh(), "no_grad is per poll");
    assert_eq!(count(), before, "the timer still runs");
    drop(task);
    assert_eq!(count(), before + 1, "left when the future is dropped");
    assert_eq!(state(), fresh());
}

/// Records, when dropped, the grad mode and how many `timed` runs of
/// `async_scopes::cancelled` were recorded by then.
struct DropProbe<'a>(&'a std::cell::Cell<Option<(bool, u64)>>);

impl Drop for DropProbe<'_> {
    fn drop(&mut self) {
        let timed = tch_scope::report()
            .timing("async_scopes::cancelled")
            .map_or(0, |t| t.count);
        self.0.set(Some((tch_scope::is_grad_enabled(), timed)));
    }
}

#[tch_scope::scope(no_grad, timed("async_scopes::cancelled"))]
async fn cancelled_mid_flight(seen: &std::cell::Cell<Option<(bool, u64)>>) {
    let _probe = DropProbe(seen);
    YieldOnce::default().await;
    unreachable!("dropped before the second poll");
}

#[test]
fn a_cancelled_future_drops_its_locals_inside_its_scopes() {
    let seen = std::cell::Cell::new(None);
    let before = tch_scope::report()
        .timing("async_scopes::cancelled")
        .map_or(0, |t| t.count);
    {
        let mut fut = Box::pin(cancelled_mid_flight(&seen));
        assert!(poll_once(fut.as_mut()).is_pending());
        assert_eq!(state(), fresh());
    } // dropped here, mid-flight
    // The local saw `no_grad` (per poll, re-entered for the drop) and the
    // timer still open (it spans the future and is left after the locals).
    assert_eq!(seen.get(), Some((false, before)));
    let after = tch_scope::report();
    assert_eq!(
        after.timing("async_scopes::cancelled").unwrap().count,
        before + 1
    );
    assert_eq!(state(), fresh());

    // The same through `in_scope`, and a future never polled enters nothing.
    let seen = std::cell::Cell::new(None);
    let mut fut = Box::pin(
        async {
            let _probe = DropProbe(&seen);
            YieldOnce::default().await;
        }
        .in_scope(NoGrad),
    );
    assert!(poll_once(fut.as_mut()).is_pending());
    drop(fut);
    assert_eq!(seen.get().map(|(grad, _)| grad), Some(false));
    assert_eq!(state(), fresh());
}
