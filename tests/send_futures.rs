//! An attributed `async fn`, and a `scoped!` body that awaits,
//! is `Send` whenever its body is, for every word whose state is not tied
//! to one OS thread. These are compile-time checks (each `assert_send` is
//! a type check) plus real spawns on a multi-thread runtime.

use std::time::Duration;

use tch::CModule;
use tch_scope::{Scope, scope, scoped};

use crate::util::YieldOnce;

fn assert_send<T: Send>(t: T) -> T {
    t
}

/// One attributed `async fn` per word; each awaits, so its scopes are
/// held across a suspension.
macro_rules! async_fns {
    ($($name:ident: [$($word:tt)*];)*) => {
        $(
            #[scope($($word)*)]
            async fn $name() -> u32 {
                YieldOnce::default().await;
                1
            }
        )*
        /// Every future above is `Send` (a compile-time check).
        #[test]
        fn attributed_async_fns_are_send() {
            $( drop(assert_send($name())); )*
        }
    };
}

async_fns! {
    f_timed: [timed];
    f_timed_named: [timed("send::named")];
    f_timed_sync: [timed(sync)];
    f_timed_events: [timed(events)];
    f_memory: [memory_scope];
    f_gpu_memory: [gpu_memory_scope(device = 0)];
    f_record: [record("send::record")];
    f_deadline: [deadline(Duration::from_secs(5))];
    f_device: [device(cpu)];
    f_no_grad: [no_grad];
    f_enable_grad: [enable_grad];
    f_grad: [grad(false)];
    f_inference: [inference_mode];
    f_inference_off: [inference_mode(false)];
    f_seed: [seed(7)];
    f_fork_rng: [fork_rng];
    f_matmul: [matmul_precision("high")];
    f_tf32: [tf32(true)];
    f_cudnn: [cudnn(benchmark = true)];
    f_sdpa: [sdpa(math)];
    f_deterministic: [deterministic];
    f_anomaly: [detect_anomaly];
    f_threads: [threads(1)];
    f_list: [no_grad, inference_mode, timed("send::list"), memory_scope, deadline(Duration::from_secs(5))];
}

#[scope(eval(model), no_grad, timed)]
async fn eval_async(model: &CModule) -> u32 {
    YieldOnce::default().await;
    2
}

#[scope(train(model), timed)]
async fn train_async(model: &CModule) -> u32 {
    YieldOnce::default().await;
    3
}

/// A user scope whose guard is `Send`.
struct Counter;
impl Scope for Counter {
    type Guard = ();
    type Error = std::convert::Infallible;
    fn enter(&mut self) -> Result<(), std::convert::Infallible> {
        Ok(())
    }
}

#[scope(with(Counter), timed)]
async fn with_async() -> u32 {
    YieldOnce::default().await;
    4
}

/// A flat body that calls a macro gets a debug watch over its scopes
/// (see `async_hidden_await`); dropped with them, before the next
/// `.await`, it leaves the future `Send`.
#[test]
fn a_flat_body_that_calls_a_macro_keeps_its_future_send() {
    macro_rules! double {
        ($x:expr) => {
            $x * 2
        };
    }
    drop(assert_send(async {
        let n = scoped!(with(Counter), timed("send::flat_macro") => double!(3));
        YieldOnce::default().await;
        n
    }));
}

#[test]
fn model_and_with_futures_are_send() {
    let model = CModule::load(
        crate::bundle::tests_dir()
            .join("data")
            .join("bn_dropout.pt"),
    )
    .unwrap();
    drop(assert_send(eval_async(&model)));
    drop(assert_send(train_async(&model)));
    drop(assert_send(with_async()));
    drop(assert_send(async {
        scoped!(no_grad, timed("send::block"), memory_scope => {
            YieldOnce::default().await;
            5
        })
    }));
    drop(assert_send(async {
        tch_scope::try_scoped!(inference_mode, timed, deadline(Duration::from_secs(5)) => {
            YieldOnce::default().await;
            6
        })
    }));
}
