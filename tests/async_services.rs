//! Scopes in async code as services use it — handlers spawned on
//! a multi-thread runtime, async-trait methods, `-> impl Future`, awaits
//! hidden in `join!`/`select!`, and measurement names of methods.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tch_scope::{
    is_grad_enabled, is_inference_mode_enabled, no_grad, report, scope, scoped, timed,
};

use crate::util::{fresh, state};

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .unwrap()
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

#[scope(
    inference_mode,
    timed("async_services::handler"),
    deadline(Duration::from_secs(30))
)]
async fn handler(i: u32) -> (u32, bool, bool) {
    let before = is_inference_mode_enabled();
    // A real suspension: the task may resume on another worker.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let x = tch::Tensor::from_slice(&[1.0f32, 2.0]) * f64::from(i);
    (i, before, is_inference_mode_enabled() && !x.requires_grad())
}

#[test]
fn attributed_handlers_spawn_on_a_multi_thread_runtime_and_report() {
    let rt = multi_thread();
    let results = rt.block_on(async {
        let tasks: Vec<_> = (0..16).map(|i| tokio::spawn(handler(i))).collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    for (i, (j, before, after)) in results.into_iter().enumerate() {
        assert_eq!(u32::try_from(i).unwrap(), j);
        assert!(before && after, "inference mode off inside handler {i}");
    }
    // Every worker thread is back to its own state.
    let states = rt.block_on(async {
        let checks: Vec<_> = (0..16)
            .map(|_| tokio::spawn(async { (state(), fresh()) }))
            .collect();
        let mut out = Vec::new();
        for c in checks {
            out.push(c.await.unwrap());
        }
        out
    });
    for (s, f) in states {
        assert_eq!(s, f);
    }
    let row = report().timing("async_services::handler").cloned().unwrap();
    assert_eq!(row.count, 16);
    // The durations span the awaits, not one poll.
    assert!(row.min >= Duration::from_millis(20), "{row:?}");
}

/// A model behind a trait, as services write it.
#[async_trait]
trait Predict {
    async fn predict(&self) -> (bool, bool);
}

struct Net;

#[async_trait]
impl Predict for Net {
    #[scope(no_grad, timed)]
    async fn predict(&self) -> (bool, bool) {
        let before = is_grad_enabled();
        tokio::time::sleep(Duration::from_millis(20)).await;
        (before, is_grad_enabled())
    }
}

#[async_trait(?Send)]
trait LocalPredict {
    async fn predict_local(&self) -> Result<bool, tch_scope::ScopeError>;
}

#[async_trait(?Send)]
impl LocalPredict for Net {
    #[scope(inference_mode, device(cpu))]
    async fn predict_local(&self) -> Result<bool, tch_scope::ScopeError> {
        tokio::task::yield_now().await;
        Ok(is_inference_mode_enabled())
    }
}

#[test]
fn async_trait_methods_are_scoped_per_poll_not_at_construction() {
    let rt = multi_thread();
    static NET: Net = Net;
    let fut = NET.predict();
    // Building the future entered nothing.
    assert_eq!(state(), fresh());
    let handle = rt.spawn(fut);
    let (before, after) = rt.block_on(handle).unwrap();
    assert!(
        !before && !after,
        "grad mode was on inside an async-trait method"
    );
    let name = format!("{}::Net::predict", module_path!());
    let row = report().timing(&name).cloned().unwrap_or_else(|| {
        panic!(
            "no row {name}: {:?}",
            report().timings.iter().map(|t| &t.name).collect::<Vec<_>>()
        )
    });
    assert_eq!(row.count, 1);
    assert!(
        row.total >= Duration::from_millis(20),
        "timed only the construction: {row:?}"
    );

    let local = current_thread().block_on(Net.predict_local()).unwrap();
    assert!(
        local,
        "inference mode off inside a ?Send async-trait method"
    );
    assert_eq!(state(), fresh());
}

#[no_grad]
#[timed("async_services::impl_future")]
fn returns_a_future(flag: Arc<AtomicBool>) -> impl Future<Output = bool> + Send {
    // Outside the async block: runs at construction, outside the scopes.
    flag.store(is_grad_enabled(), Ordering::SeqCst);
    async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        !is_grad_enabled()
    }
}

#[test]
fn impl_future_bodies_are_scoped_per_poll() {
    let flag = Arc::new(AtomicBool::new(false));
    let fut = returns_a_future(flag.clone());
    assert!(
        flag.load(Ordering::SeqCst),
        "construction ran under no_grad"
    );
    assert_eq!(state(), fresh());
    let rt = multi_thread();
    assert!(
        rt.block_on(rt.spawn(fut)).unwrap(),
        "grad mode on inside the future"
    );
    let row = report()
        .timing("async_services::impl_future")
        .cloned()
        .unwrap();
    assert_eq!(row.count, 1);
    assert!(row.total >= Duration::from_millis(20), "{row:?}");
}

/// Grad mode as a task sees it, after a suspension.
async fn grad_after_yield() -> bool {
    tokio::task::yield_now().await;
    is_grad_enabled()
}

#[test]
fn join_inside_scoped_runs_the_joined_futures_inside_and_other_tasks_outside() {
    let rt = current_thread();
    let local = tokio::task::LocalSet::new();
    let (inside, outside, futures_inside, selected) = local.block_on(&rt, async {
        // Another task on this thread, polled while the joined futures wait.
        let other = tokio::task::spawn_local(async {
            let mut seen = Vec::new();
            for _ in 0..4 {
                seen.push(is_grad_enabled());
                tokio::task::yield_now().await;
            }
            seen
        });
        let inside = scoped!(no_grad => {
            tokio::join!(grad_after_yield(), async {
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
                is_grad_enabled()
            })
        });
        let futures_inside =
            scoped!(no_grad => { futures::join!(grad_after_yield(), grad_after_yield()) });
        let selected = tch_scope::try_scoped!(no_grad => {
            tokio::select! {
                g = grad_after_yield() => g,
                () = tokio::time::sleep(Duration::from_secs(5)) => true,
            }
        })
        .unwrap();
        (inside, other.await.unwrap(), futures_inside, selected)
    });
    assert_eq!(
        inside,
        (false, false),
        "the joined futures ran outside no_grad"
    );
    assert_eq!(futures_inside, (false, false));
    assert!(!selected, "the selected future ran outside no_grad");
    assert!(
        outside.iter().all(|&g| g),
        "no_grad leaked into another task: {outside:?}"
    );
    assert_eq!(state(), fresh());
}

struct Encoder;
struct Decoder;

impl Encoder {
    #[timed]
    fn forward(&self) -> u8 {
        1
    }
}

impl Decoder {
    #[timed]
    fn forward(&self) -> u8 {
        2
    }

    #[tch_scope::memory_scope]
    fn step(&self) -> u8 {
        3
    }
}

#[test]
fn methods_are_named_by_their_type_and_scoped_blocks_by_line_and_column() {
    let (e, d) = (Encoder, Decoder);
    for _ in 0..3 {
        assert_eq!(e.forward() + d.forward() + d.step(), 6);
    }
    let _ = d.forward();
    let r = report();
    let module = module_path!();
    assert_eq!(
        r.timing(&format!("{module}::Encoder::forward"))
            .unwrap()
            .count,
        3
    );
    assert_eq!(
        r.timing(&format!("{module}::Decoder::forward"))
            .unwrap()
            .count,
        4
    );
    assert_eq!(
        r.memory(&format!("{module}::Decoder::step")).unwrap().count,
        3
    );

    let (a, b) = (scoped!(timed => 1), scoped!(timed => 2));
    assert_eq!(a + b, 3);
    let line = line!() - 2;
    let here: Vec<_> = report()
        .timings
        .into_iter()
        .filter(|t| t.name.starts_with(&format!("{module}:{line}:")))
        .collect();
    assert_eq!(
        here.len(),
        2,
        "two scoped!(timed) on one line share a row: {here:?}"
    );
    assert!(here.iter().all(|t| t.count == 1));
}

#[test]
fn adapters_give_the_value_for_scopes_that_cannot_fail() {
    use tch_scope::{NoGrad, OnDevice, ScopeFutureExt, ScopeIterExt};
    let rt = current_thread();
    // Infallible scope: `T`, as tracing's `.instrument(span)` gives.
    let grad: bool = rt.block_on(async { is_grad_enabled() }.in_scope(NoGrad));
    assert!(!grad);
    let items: Vec<bool> = (0..2).map(|_| is_grad_enabled()).in_scope(NoGrad).collect();
    assert_eq!(items, [false, false]);
    // A scope that can fail: `Result<T, ScopeError>`.
    let on_cpu: Result<u8, tch_scope::ScopeError> =
        rt.block_on(async { 7 }.in_scope(OnDevice::new(tch::Device::Cpu)));
    assert_eq!(on_cpu.unwrap(), 7);
    let mut it = [1u8].into_iter().in_scope(OnDevice::new(tch::Device::Cpu));
    assert_eq!(it.next().map(Result::unwrap), Some(1));
    assert_eq!(state(), fresh());
}
