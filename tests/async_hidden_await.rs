//! An `.await` hidden in the user's own macro: `scoped!` cannot see it, so
//! it expands its flat form and the scope stays entered across the await,
//! where other tasks on the thread run inside it. Debug builds report that
//! loudly — when the thread next polls a scoped future, or when the scoped
//! poll around the leaking code returns — instead of letting a neighbour
//! run silently without grad. Release builds do not check (no cost).

use tch_scope::{OnDevice, ScopeFutureExt, is_grad_enabled, scoped};
use tokio::task::{LocalSet, spawn_local, yield_now};

use crate::util::{YieldOnce, block_on, fresh, state};

/// A user's macro that awaits: `scoped!` sees only `$fut`.
macro_rules! settle {
    ($fut:expr) => {
        $fut.await
    };
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// The reports: debug builds only.
#[cfg(debug_assertions)]
mod reported {
    use std::any::Any;
    use std::panic::{AssertUnwindSafe, catch_unwind};

    use super::{
        LocalSet, OnDevice, ScopeFutureExt, YieldOnce, current_thread, fresh, is_grad_enabled,
        scoped, spawn_local, state, yield_now,
    };
    use crate::util::poll_once;

    fn panic_text(payload: &(dyn Any + Send)) -> String {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(ToString::to_string))
            .unwrap_or_default()
    }

    /// What the report must say: which scope, where, why, what to write.
    fn assert_names_the_leak(text: &str, line: u32) {
        for part in [
            "`no_grad`",
            &format!("async_hidden_await.rs:{line}"),
            "inside a macro",
            "async { my_macro!(..) }.await",
        ] {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
    }

    #[test]
    fn a_hidden_await_is_reported_when_a_neighbour_task_polls() {
        let leaking_line = line!() + 5;
        let (leaker, neighbour) = LocalSet::new().block_on(&current_thread(), async {
            // Polled first: enters `no_grad` and suspends inside `settle!`
            // with the scope still entered.
            let leaker = spawn_local(async {
                scoped!(no_grad => {
                    settle!(yield_now());
                    is_grad_enabled()
                })
            });
            // Polled next on the same thread; it never asked for `no_grad`.
            let neighbour = spawn_local(async {
                scoped!(record("async_hidden_await::neighbour") => {
                    let seen = is_grad_enabled();
                    yield_now().await;
                    seen
                })
            });
            (leaker.await, neighbour.await)
        });
        // The leaking body itself ran as written.
        assert_eq!(leaker.ok(), Some(false));
        let neighbour = match neighbour {
            Ok(grad) => panic!("the neighbour ran without a report and saw grad mode {grad}"),
            Err(e) => e.into_panic(),
        };
        assert_names_the_leak(&panic_text(&*neighbour), leaking_line);
        assert_eq!(state(), fresh());
    }

    #[test]
    fn a_hidden_await_is_reported_when_its_scoped_poll_returns() {
        let leaking_line = line!() + 4;
        // The leaking code inside a per-poll scope of its own (a device here):
        // its poll returns while `no_grad` is still entered.
        let task = async {
            scoped!(no_grad => {
                settle!(YieldOnce::default());
                is_grad_enabled()
            })
        };
        let mut task = Box::pin(task.in_scope(OnDevice::new(tch::Device::Cpu)));
        let first = catch_unwind(AssertUnwindSafe(|| poll_once(task.as_mut())));
        let payload = match first {
            Ok(p) => panic!(
                "the poll returned {:?} with grad mode {} left on this thread",
                p.is_pending(),
                is_grad_enabled()
            ),
            Err(e) => e,
        };
        assert_names_the_leak(&panic_text(&*payload), leaking_line);
        // The task still holds `no_grad` (that is the mistake reported);
        // dropping it, as an executor drops a panicked task, restores grad.
        drop(task);
        assert_eq!(state(), fresh());
    }

    /// `try_scoped!` is watched the same way, and names itself.
    #[test]
    fn a_hidden_await_in_try_scoped_is_reported_too() {
        let task = async {
            tch_scope::try_scoped!(inference_mode, timed("async_hidden_await::try") => {
                settle!(YieldOnce::default());
            })
        };
        let mut task = Box::pin(task.in_scope(OnDevice::new(tch::Device::Cpu)));
        let payload = catch_unwind(AssertUnwindSafe(|| poll_once(task.as_mut())))
            .expect_err("the poll returned with inference mode left entered");
        let text = panic_text(&*payload);
        assert!(
            text.starts_with("`inference_mode` entered by `try_scoped!` at"),
            "{text}"
        );
        drop(task);
        assert_eq!(state(), fresh());
    }
}

/// Not a leak: the scope covers a future driven to completion inside it,
/// on this thread (a `block_on` inside the body), through a macro that
/// `scoped!` knows does not await.
#[test]
fn a_future_run_to_completion_inside_a_flat_body_is_not_reported() {
    let inner = scoped!(no_grad => {
        assert!(!is_grad_enabled(), "inside");
        block_on(
            async {
                YieldOnce::default().await;
                is_grad_enabled()
            }
            .in_scope(OnDevice::new(tch::Device::Cpu)),
        )
    });
    assert_eq!(inner.ok(), Some(false));
    assert_eq!(state(), fresh());
}

/// The documented way for a macro `scoped!` can't see into: one visible
/// `.await` makes the body a per-poll future, so the neighbour sees grad on.
#[test]
fn one_visible_await_keeps_the_scope_per_poll() {
    let (leaker, neighbour) = LocalSet::new().block_on(&current_thread(), async {
        let leaker = spawn_local(async {
            scoped!(no_grad => {
                async { settle!(yield_now()) }.await;
                is_grad_enabled()
            })
        });
        let neighbour = spawn_local(async {
            scoped!(record("async_hidden_await::visible") => {
                let seen = is_grad_enabled();
                yield_now().await;
                seen
            })
        });
        (leaker.await, neighbour.await)
    });
    assert_eq!((leaker.ok(), neighbour.ok()), (Some(false), Some(true)));
    assert_eq!(state(), fresh());
}
