//! `deadline(duration)`: once it has passed, the next operator fails, the
//! scope ends with its `ScopeError`, and libtorch works as before after it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::time::Duration;

use tch::{TchError, Tensor};
use tch_scope::{Deadline, ScopeError, ScopeFutureExt, deadline, scoped, try_scoped};

use crate::util::{YieldOnce, block_on, fresh, poll_once, state};

const LONG: Duration = Duration::from_secs(3600);

fn square() -> Tensor {
    Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).view([2, 2])
}

/// The product outside any deadline, to compare with after one.
fn product() -> Vec<f32> {
    let a = square();
    Vec::<f32>::try_from(a.mm(&a).flatten(0, -1)).unwrap()
}

/// libtorch refuses nothing on this thread, and computes what it did.
fn libtorch_is_usable(want: &[f32]) {
    let a = square();
    let got = Vec::<f32>::try_from(a.f_mm(&a).unwrap().flatten(0, -1)).unwrap();
    assert_eq!(got, want);
}

fn message(e: &ScopeError) -> String {
    e.to_string()
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

#[test]
fn a_passed_deadline_refuses_the_next_operator_and_names_it() {
    let want = product();
    let a = square();
    let e = try_scoped!(deadline(Duration::ZERO) => a.mm(&a)).unwrap_err();
    let msg = message(&e);
    assert!(msg.starts_with("deadline of 0 us exceeded after "), "{msg}");
    assert!(msg.ends_with(" at aten::mm"), "{msg}");
    assert!(e.is_ended());
    assert_eq!(e.scope(), "deadline(0ns)");
    libtorch_is_usable(&want);
    assert_eq!(state(), fresh());
}

#[test]
fn operators_before_the_deadline_run_and_the_first_after_it_fails() {
    let want = product();
    let a = square();
    let r = try_scoped!(deadline(Duration::from_millis(50)) => {
        let b = a.mm(&a); // well inside the budget
        std::thread::sleep(Duration::from_millis(60));
        b.relu()
    });
    let msg = message(&r.unwrap_err());
    assert!(
        msg.starts_with("deadline of 50 ms exceeded after "),
        "{msg}"
    );
    assert!(msg.ends_with(" at aten::relu"), "{msg}");
    let after: u64 = msg["deadline of 50 ms exceeded after ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(after >= 60, "{msg}");
    libtorch_is_usable(&want);
}

#[test]
fn f_methods_and_panicking_methods_end_with_the_same_error() {
    let a = square();
    // `f_mm` returns Err(TchError): the scope's value becomes its error.
    let r: Result<Result<Tensor, TchError>, ScopeError> =
        try_scoped!(deadline(Duration::ZERO) => a.f_mm(&a));
    assert!(message(&r.unwrap_err()).ends_with(" at aten::mm"));
    // `mm` panics inside tch: caught, and the scope ends with the error.
    let r = try_scoped!(deadline(Duration::ZERO) => a.mm(&a));
    assert!(message(&r.unwrap_err()).ends_with(" at aten::mm"));
    // `scoped!` panics with the error's message.
    let p = catch_unwind(AssertUnwindSafe(
        || scoped!(deadline(Duration::ZERO) => a.mm(&a)),
    ))
    .unwrap_err();
    let text = panic_text(&*p);
    assert!(
        text.starts_with("deadline of 0 us exceeded after "),
        "{text}"
    );
    assert!(text.ends_with(" at aten::mm"), "{text}");
}

#[test]
fn a_body_that_handles_the_failure_still_ends_with_the_deadline() {
    let a = square();
    let r = try_scoped!(deadline(Duration::ZERO) => a.f_mm(&a).is_err());
    assert!(r.is_err());
}

#[test]
fn other_panics_come_through_untouched() {
    let a = square();
    let p = catch_unwind(|| try_scoped!(deadline(LONG) => panic!("my own"))).unwrap_err();
    assert_eq!(panic_text(&*p), "my own");
    // Even after the deadline refused an operator.
    let p = catch_unwind(AssertUnwindSafe(|| {
        try_scoped!(deadline(Duration::ZERO) => {
            assert!(a.f_mm(&a).is_err());
            panic!("my own too")
        })
    }))
    .unwrap_err();
    assert_eq!(panic_text(&*p), "my own too");
    assert_eq!(state(), fresh());
}

#[test]
fn nothing_is_refused_before_the_deadline() {
    let want = product();
    let a = square();
    let r = try_scoped!(no_grad, deadline(LONG) => {
        Vec::<f32>::try_from(a.mm(&a).flatten(0, -1)).unwrap()
    });
    assert_eq!(r, Ok(want));
    assert_eq!(state(), fresh());
}

#[test]
fn nested_deadlines_the_earliest_wins() {
    let want = product();
    let a = square();
    // The inner one is earlier: it ends the inner scope only; the outer
    // body goes on, and its operators run again once the inner is left.
    let outer = try_scoped!(deadline(LONG) => {
        let inner = try_scoped!(deadline(Duration::ZERO) => a.mm(&a));
        assert!(message(&inner.unwrap_err()).starts_with("deadline of 0 us"));
        Vec::<f32>::try_from(a.mm(&a).flatten(0, -1)).unwrap()
    });
    assert_eq!(outer, Ok(want.clone()));
    // The outer one is earlier: a later inner deadline does not extend it,
    // and both scopes end with the outer deadline's error.
    let outer = try_scoped!(deadline(Duration::from_millis(30)) => {
        std::thread::sleep(Duration::from_millis(40));
        let inner = try_scoped!(deadline(LONG) => a.mm(&a));
        let e = inner.unwrap_err();
        assert!(message(&e).starts_with("deadline of 30 ms exceeded after"), "{e}");
        // Still past the outer deadline after the inner scope: refused.
        a.f_mm(&a).is_ok()
    });
    assert!(message(&outer.unwrap_err()).starts_with("deadline of 30 ms exceeded after"));
    libtorch_is_usable(&want);
}

#[test]
fn a_condition_that_is_false_sets_no_deadline() {
    let a = square();
    for on in [true, false] {
        let r = try_scoped!(deadline(Duration::ZERO) if on => a.mm(&a));
        assert_eq!(r.is_err(), on);
    }
}

#[derive(Debug)]
struct ServeError(String);

impl From<ScopeError> for ServeError {
    fn from(e: ScopeError) -> Self {
        ServeError(e.to_string())
    }
}

impl From<TchError> for ServeError {
    fn from(e: TchError) -> Self {
        ServeError(format!("tch: {e}"))
    }
}

#[deadline(budget)]
fn serve(budget: Duration, x: &Tensor) -> Result<Tensor, ServeError> {
    Ok(x.f_mm(x)?.relu())
}

#[deadline(budget)]
fn serve_panicking(budget: Duration, x: &Tensor) -> Result<Tensor, ServeError> {
    Ok(x.mm(x))
}

#[tch_scope::scope(no_grad, deadline(budget))]
fn forward(budget: Duration, x: &Tensor) -> Tensor {
    x.mm(x)
}

#[test]
fn attributed_functions_return_or_panic_with_the_error() {
    let want = product();
    let x = square();
    // `?` on the refused operator: the error is the deadline's, not tch's.
    let e = serve(Duration::ZERO, &x).unwrap_err();
    assert!(e.0.starts_with("deadline of 0 us exceeded after "), "{e:?}");
    assert!(e.0.ends_with(" at aten::mm"), "{e:?}");
    let e = serve_panicking(Duration::ZERO, &x).unwrap_err();
    assert!(e.0.ends_with(" at aten::mm"), "{e:?}");
    assert!(serve(LONG, &x).is_ok());
    // Not a `Result`: a panic with the message.
    let p = catch_unwind(|| forward(Duration::ZERO, &x)).unwrap_err();
    assert!(panic_text(&*p).ends_with(" at aten::mm"));
    assert!(!forward(LONG, &x).requires_grad());
    libtorch_is_usable(&want);
    assert_eq!(state(), fresh());
}

#[test]
fn a_deadline_on_one_thread_does_not_touch_another() {
    let want = product();
    let (entered, wait_entered) = mpsc::channel();
    let (checked, wait_checked) = mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        let a = square();
        try_scoped!(deadline(Duration::ZERO) => {
            entered.send(()).unwrap();
            wait_checked.recv().unwrap();
            a.mm(&a)
        })
        .map(|_| ())
    });
    wait_entered.recv().unwrap();
    // The worker's deadline has passed and its scope is open.
    libtorch_is_usable(&want);
    checked.send(()).unwrap();
    let r = worker.join().unwrap();
    assert!(message(&r.unwrap_err()).ends_with(" at aten::mm"));
}

#[test]
fn a_future_keeps_the_deadline_of_its_first_poll_and_leaks_it_to_no_other_task() {
    let want = product();
    let mut slow = std::pin::pin!(
        async {
            let a = square();
            let before = a.f_mm(&a).is_ok();
            YieldOnce::default().await;
            (before, a.f_mm(&a).map(|_| ()))
        }
        .in_scope(Deadline::new(Duration::from_millis(30)))
    );
    assert!(poll_once(slow.as_mut()).is_pending());
    std::thread::sleep(Duration::from_millis(40));
    // Between the polls, another task on this thread runs freely.
    block_on(async { libtorch_is_usable(&want) });
    let std::task::Poll::Ready(Ok((before, after))) = poll_once(slow.as_mut()) else {
        panic!("the future should be done");
    };
    assert!(before);
    let e = after.unwrap_err().to_string();
    assert!(e.contains("deadline of 30 ms exceeded after"), "{e}");
    libtorch_is_usable(&want);
}

#[deadline(budget)]
fn early_return(budget: Duration, x: &Tensor, stop: bool) -> Result<Tensor, ServeError> {
    if stop {
        return Ok(x.shallow_clone());
    }
    Ok(x.f_relu()?)
}

#[test]
fn every_way_out_of_an_attributed_deadline_closes_it() {
    let want = product();
    let x = square();
    // `return` before any operator: the deadline passed but refused nothing.
    assert!(early_return(Duration::ZERO, &x, true).is_ok());
    libtorch_is_usable(&want);
    // The tail, `?` and a panic, each followed by a free operator.
    assert!(early_return(LONG, &x, false).is_ok());
    libtorch_is_usable(&want);
    assert!(early_return(Duration::ZERO, &x, false).is_err());
    libtorch_is_usable(&want);
    assert!(catch_unwind(|| forward(Duration::ZERO, &x)).is_err());
    libtorch_is_usable(&want);
    assert_eq!(state(), fresh());
}
