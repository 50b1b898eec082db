//! A request's scopes on another thread: a `Context`
//! captured where the request arrives and entered with `with(ctx)` on a
//! worker fed by a channel, as a serving pool does; deadlines as instants
//! (`deadline(until = t)`, `Deadline::until`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use tch::{Device, Kind, Tensor};
use tch_scope::{
    Context, Deadline, ScopeError, deadline, is_grad_enabled, is_inference_mode_enabled, scope,
    scoped, try_scoped,
};

use crate::util::{YieldOnce, block_on, fresh, leaf, poll_once, state};

fn square() -> Tensor {
    Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).view([2, 2])
}

/// Runs every job sent to it on one long-lived thread, like a model
/// worker; each job answers on its own channel.
struct Worker {
    jobs: Option<mpsc::Sender<Box<dyn FnOnce() + Send>>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Worker {
    fn new() -> Self {
        let (jobs, rx) = mpsc::channel::<Box<dyn FnOnce() + Send>>();
        let thread = thread::spawn(move || {
            for job in rx {
                job();
            }
        });
        Self {
            jobs: Some(jobs),
            thread: Some(thread),
        }
    }

    /// Runs `f` on the worker and waits for its value (a panic in `f`
    /// comes back as a panic here).
    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        let job = move || {
            let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
        };
        self.jobs.as_ref().unwrap().send(Box::new(job)).unwrap();
        match rx.recv().unwrap() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the worker saw of one `with(ctx)` body and after it.
#[derive(Debug)]
struct Seen {
    grad: bool,
    inference: bool,
    records_grad: bool,
    before_ok: bool,
    after: Result<(), String>,
}

/// On the worker: enter `ctx`, run an operator, wait until `until`, run
/// another (refused if `ctx` carries a deadline by then).
fn work_until(ctx: Context, until: Instant) -> Seen {
    let a = square();
    let w = leaf();
    scoped!(with(ctx) => {
        let before_ok = a.f_mm(&a).is_ok();
        let records_grad = w.f_mul(&w).map(|t| t.requires_grad()).unwrap_or(true);
        let (grad, inference) = (is_grad_enabled(), is_inference_mode_enabled());
        thread::sleep(until.saturating_duration_since(Instant::now()));
        let after = a.f_mm(&a).map(|_| ()).map_err(|e| e.to_string());
        Seen { grad, inference, records_grad, before_ok, after }
    })
}

/// On the worker, after a job: its own state is back and nothing is
/// refused.
fn worker_is_itself() -> bool {
    let a = square();
    state() == fresh() && a.f_mm(&a).is_ok() && leaf().f_mul(&leaf()).unwrap().requires_grad()
}

#[test]
fn context_is_send_and_static() {
    fn send_static<T: Send + Sync + Clone + 'static>(_: &T) {}
    send_static(&Context::capture());
}

#[test]
fn no_grad_and_an_instant_deadline_follow_the_request_to_a_worker() {
    let worker = Worker::new();
    let t = Instant::now() + Duration::from_millis(300);
    let ctx = scoped!(no_grad, deadline(until = t) => Context::capture());
    assert!(!ctx.is_grad_enabled());
    assert!(!ctx.is_inference_mode_enabled());
    let carried = ctx.deadline().expect("the deadline was captured");
    assert!(carried.max(t) - carried.min(t) < Duration::from_millis(5));
    // The capturing thread's own state is back already.
    assert_eq!(state(), fresh());

    let seen = worker.run(move || work_until(ctx, t + Duration::from_millis(20)));
    assert!(!seen.grad, "{seen:?}");
    assert!(!seen.inference, "{seen:?}");
    assert!(!seen.records_grad, "{seen:?}");
    assert!(seen.before_ok, "{seen:?}");
    let e = seen.after.unwrap_err();
    assert!(e.contains("deadline passed "), "{e}");
    assert!(e.contains(" ago at aten::mm"), "{e}");
    assert!(worker.run(worker_is_itself));
}

#[test]
fn a_budget_deadline_keeps_counting_from_its_entry_on_the_origin_thread() {
    let worker = Worker::new();
    let entered = Instant::now();
    let ctx = scoped!(deadline(Duration::from_millis(200)) => Context::capture());
    let end = entered + Duration::from_millis(230);
    let seen = worker.run(move || work_until(ctx, end));
    assert!(seen.grad && seen.before_ok, "{seen:?}");
    let e = seen.after.unwrap_err();
    assert!(e.contains("deadline of 200 ms exceeded after "), "{e}");
    assert!(worker.run(worker_is_itself));
}

#[test]
fn the_worker_gets_its_own_state_back_after_a_panic_inside() {
    let worker = Worker::new();
    // Passed already: the worker's operators are refused inside only.
    let ctx =
        scoped!(no_grad, inference_mode, deadline(until = Instant::now()) => Context::capture());
    let r = worker.run(move || {
        let r = catch_unwind(AssertUnwindSafe(|| {
            scoped!(with(ctx) => {
                assert!(!is_grad_enabled() && is_inference_mode_enabled());
                panic!("model failed");
            })
        }));
        (r.is_err(), worker_is_itself())
    });
    assert_eq!(r, (true, true));
}

#[test]
fn the_captured_state_replaces_the_workers_own_and_gives_it_back() {
    let worker = Worker::new();
    let ctx = Context::capture(); // grad on, no deadline
    let (seen, r) = worker.run(move || {
        let a = square();
        let mut seen = None;
        let r = try_scoped!(no_grad, deadline(Duration::ZERO) => {
            let inside = scoped!(with(&ctx) => (is_grad_enabled(), a.f_mm(&a).is_ok()));
            // The worker's own no_grad and passed deadline again.
            seen = Some((inside, (is_grad_enabled(), a.f_mm(&a).is_ok())));
        });
        (seen, r.map_err(|e| e.to_string()))
    });
    assert_eq!(seen, Some(((true, true), (false, false))));
    // The worker's `deadline` scope ends with its error, for the operator
    // refused after the context.
    let e = r.unwrap_err();
    assert!(e.starts_with("deadline of 0 us exceeded"), "{e}");
    assert!(worker.run(worker_is_itself));
}

#[test]
fn a_deadline_entered_inside_the_context_still_counts_and_the_earliest_wins() {
    let worker = Worker::new();
    let ctx = scoped!(deadline(Duration::from_secs(3600)) => Context::capture());
    let r = worker.run(move || {
        let a = square();
        try_scoped!(with(ctx), deadline(Duration::ZERO) => a.mm(&a)).map(|_| ())
    });
    let e = r.unwrap_err();
    assert!(
        e.to_string().starts_with("deadline of 0 us exceeded"),
        "{e}"
    );
    assert!(worker.run(worker_is_itself));
}

#[test]
fn autocast_follows_the_request() {
    let worker = Worker::new();
    let ctx = scoped!(autocast(cpu, bf16) => Context::capture());
    let kinds = worker.run(move || {
        let a = Tensor::ones([4, 4], (Kind::Float, Device::Cpu));
        let inside = scoped!(with(ctx) => a.matmul(&a).kind());
        (inside, a.matmul(&a).kind())
    });
    assert_eq!(kinds, (Kind::BFloat16, Kind::Float));
}

#[test]
fn context_run_ends_with_the_deadlines_error_on_the_worker() {
    let worker = Worker::new();
    let ctx = scoped!(no_grad, deadline(until = Instant::now()) => Context::capture());
    let ctx2 = ctx.clone();
    let (r, ok) = worker.run(move || {
        let a = square();
        let r: Result<Tensor, ScopeError> = ctx.run(|| a.mm(&a)); // mm panics inside
        (r.map(|_| ()), Context::capture().run(|| a.mm(&a)).is_ok())
    });
    let e = r.unwrap_err();
    assert!(e.is_ended());
    assert!(e.to_string().starts_with("deadline passed "), "{e}");
    assert!(ok);
    // Without operators, nothing is refused and the value comes back.
    assert_eq!(worker.run(move || ctx2.run(|| 7)), Ok(7));
}

#[test]
fn many_threads_enter_clones_of_one_context_at_once() {
    let ctx = scoped!(no_grad => Context::capture());
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let ctx = ctx.clone();
            thread::spawn(move || {
                (0..200).all(|_| {
                    let w = leaf();
                    let inside = scoped!(with(&ctx) => !w.f_mul(&w).unwrap().requires_grad());
                    inside && is_grad_enabled()
                })
            })
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap());
    }
}

// ---- `deadline(until = t)` and `Deadline::until` in sync code ------------

#[test]
fn deadline_until_in_the_macro_refuses_operators_after_the_instant() {
    let a = square();
    let t = Instant::now() + Duration::from_millis(50);
    let r = try_scoped!(deadline(until = t) => {
        let before = a.f_mm(&a).is_ok();
        thread::sleep(t.saturating_duration_since(Instant::now()) + Duration::from_millis(5));
        (before, a.mm(&a))
    });
    let e = r.unwrap_err();
    let msg = e.to_string();
    assert!(e.is_ended());
    assert!(msg.starts_with("deadline passed "), "{msg}");
    assert!(msg.ends_with(" ago at aten::mm"), "{msg}");
    assert!(
        e.scope().starts_with("deadline(until = now - "),
        "{}",
        e.scope()
    );
    assert_eq!(state(), fresh());
    assert!(a.f_mm(&a).is_ok());
}

#[test]
fn deadline_until_in_the_runtime_refuses_operators_after_the_instant() {
    let a = square();
    let t = Instant::now() + Duration::from_millis(50);
    let d = Deadline::until(t);
    assert_eq!(d.instant(), Some(t));
    assert_eq!(d.budget(), None);
    let r = d.run(|| {
        let before = a.f_mm(&a).is_ok();
        thread::sleep(t.saturating_duration_since(Instant::now()) + Duration::from_millis(5));
        (before, a.f_mm(&a).map(|_| ()))
    });
    let e = r.unwrap_err().to_string();
    assert!(
        e.starts_with("deadline passed ") && e.ends_with(" ago at aten::mm"),
        "{e}"
    );
    // Before the instant, everything runs.
    let later = Instant::now() + Duration::from_secs(3600);
    assert!(Deadline::until(later).run(|| a.mm(&a)).is_ok());
}

#[test]
fn an_instant_already_past_at_entry_opens_the_scope_and_refuses_the_first_operator() {
    let a = square();
    let past = Instant::now();
    thread::sleep(Duration::from_millis(2));
    // Entering is fine, and a body without operators completes.
    assert_eq!(try_scoped!(deadline(until = past) => 5), Ok(5));
    let e = try_scoped!(deadline(until = past) => a.mm(&a)).unwrap_err();
    assert!(e.to_string().starts_with("deadline passed "), "{e}");
}

#[test]
fn an_instant_earlier_than_an_open_budget_wins_and_the_other_way_round() {
    let a = square();
    let soon = Instant::now() + Duration::from_millis(40);
    let r = try_scoped!(deadline(Duration::from_secs(3600)) => {
        try_scoped!(deadline(until = soon) => {
            thread::sleep(Duration::from_millis(50));
            a.mm(&a)
        })
    });
    // Only the inner scope's deadline passed: the inner one ends with it.
    let inner = r.expect("the outer deadline did not pass");
    assert!(
        inner
            .unwrap_err()
            .to_string()
            .starts_with("deadline passed ")
    );
    let far = Instant::now() + Duration::from_secs(3600);
    let r = try_scoped!(deadline(Duration::ZERO) => {
        try_scoped!(deadline(until = far) => a.mm(&a)).map(|_| ())
    });
    // The outer budget was the earliest: both scopes end with its error.
    let e = r.unwrap_err();
    assert!(
        e.to_string().starts_with("deadline of 0 us exceeded"),
        "{e}"
    );
}

#[deadline(until = t)]
fn serve_until(t: Instant, x: &Tensor) -> Result<Tensor, ScopeError> {
    Ok(x.mm(x))
}

#[test]
fn the_attribute_takes_an_instant() {
    let a = square();
    assert!(serve_until(Instant::now() + Duration::from_secs(60), &a).is_ok());
    let e = serve_until(Instant::now(), &a).unwrap_err();
    assert!(e.to_string().starts_with("deadline passed "), "{e}");
}

#[test]
fn an_instant_deadline_in_a_future_holds_across_polls() {
    let a = square();
    let t = Instant::now() + Duration::from_millis(30);
    let mut f = std::pin::pin!(async {
        scoped!(deadline(until = t) => {
            let before = a.f_mm(&a).is_ok();
            YieldOnce::default().await;
            (before, a.f_mm(&a).map(|_| ()))
        })
    });
    assert!(poll_once(f.as_mut()).is_pending());
    thread::sleep(Duration::from_millis(40));
    block_on(async { assert!(square().f_mm(&square()).is_ok()) });
    let std::task::Poll::Ready((before, after)) = poll_once(f.as_mut()) else {
        panic!("the future should be done");
    };
    assert!(before);
    assert!(after.unwrap_err().to_string().contains("deadline passed "));
}

// ---- `with(ctx)` in every syntax -----------------------------------------

#[scope(no_grad, with(ctx))]
fn infer(ctx: Context, x: &Tensor) -> (bool, bool) {
    (is_inference_mode_enabled(), x.exp().is_inference())
}

#[tch_scope::with(ctx)]
fn infer_borrowed(ctx: &Context) -> bool {
    is_inference_mode_enabled()
}

#[test]
fn an_inference_mode_context_enters_by_macro_and_attribute() {
    let worker = Worker::new();
    let ctx = scoped!(inference_mode => Context::capture());
    assert!(ctx.is_inference_mode_enabled());
    let seen = worker.run(move || {
        let x = Tensor::ones([2], (Kind::Float, Device::Cpu));
        let by_macro = scoped!(with(ctx.clone()) => {
            (is_inference_mode_enabled(), x.exp().is_inference())
        });
        let by_attr = infer(ctx.clone(), &x);
        let borrowed = infer_borrowed(&ctx);
        let awaited = block_on(async {
            scoped!(with(&ctx) => {
                YieldOnce::default().await;
                is_inference_mode_enabled()
            })
        });
        (
            by_macro,
            by_attr,
            borrowed,
            awaited,
            is_inference_mode_enabled(),
        )
    });
    assert_eq!(seen, ((true, true), (true, true), true, true, false));
    assert!(worker.run(worker_is_itself));
}

#[test]
fn an_awaiting_body_enters_the_context_per_poll_only() {
    let ctx = scoped!(no_grad => Context::capture());
    let mut f = std::pin::pin!(async {
        scoped!(with(&ctx) => {
            let first = is_grad_enabled();
            YieldOnce::default().await;
            (first, is_grad_enabled())
        })
    });
    assert!(poll_once(f.as_mut()).is_pending());
    // Between polls the thread is itself.
    assert!(is_grad_enabled());
    let std::task::Poll::Ready(seen) = poll_once(f.as_mut()) else {
        panic!("the future should be done");
    };
    assert_eq!(seen, (false, false));
    assert_eq!(state(), fresh());
}
