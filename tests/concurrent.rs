//! Process-wide words from many threads and tasks at once: the
//! interleaving T1 in, T2 in, T1 out, T2 out for every word, with equal
//! values (shared, the original back after both) and with different ones
//! (the second refused, naming both values and the first's thread); `seed`
//! from two threads; a tokio task holding a value while it moves between
//! worker threads; what `threads(n)` does to other threads.
//! A process of its own, one test at a time (`serial()`).

use std::sync::{Arc, Barrier, Mutex, MutexGuard};
use std::thread;

use tch::{Device, Kind, Tensor};
use tch_scope::{
    Cudnn, DetectAnomaly, Deterministic, ForkRng, MatmulPrecision, Scope, ScopeError, Sdpa,
    SdpaBackend, Seed, Tf32, Threads, allow_tf32, anomaly_mode, cudnn_flags, deterministic_mode,
    matmul_precision, sdpa_backends, try_scoped,
};

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Everything the process-wide words change, as one comparable string.
fn global_state() -> String {
    format!(
        "threads={} deterministic={:?} anomaly={:?} matmul={} tf32={} cudnn={:?} sdpa={:?}",
        tch::get_num_threads(),
        deterministic_mode(),
        anomaly_mode(),
        matmul_precision(),
        allow_tf32(),
        cudnn_flags(),
        sdpa_backends(),
    )
}

/// T1 (`worker-1`) enters `a`, T2 (`worker-2`) enters `b`, T1 leaves, T2
/// leaves. Returns T2's entry error, if any; checks what each saw: `read`
/// inside T1's scope, inside T2's (after T1 left too), and the original
/// after both.
fn interleave<A, B>(a: A, b: B, read: fn() -> String) -> Option<ScopeError>
where
    A: Scope<Error = ScopeError> + Send + 'static,
    B: Scope<Error = ScopeError> + Send + 'static,
{
    let before = global_state();
    let original = read();
    let barrier = Arc::new(Barrier::new(2));
    let (b1, b2) = (Arc::clone(&barrier), Arc::clone(&barrier));
    let t1 = thread::Builder::new()
        .name("worker-1".into())
        .spawn(move || {
            let mut a = a;
            let guard = a.enter().expect("T1 enters first");
            let inside = read();
            b1.wait(); // 1: T1 is in
            b1.wait(); // 2: T2 tried
            let still = read();
            drop(guard);
            b1.wait(); // 3: T1 is out
            (inside, still)
        })
        .unwrap();
    let t2 = thread::Builder::new()
        .name("worker-2".into())
        .spawn(move || {
            let mut b = b;
            b2.wait(); // 1
            let entered = b.enter();
            let inside = read();
            b2.wait(); // 2
            b2.wait(); // 3: T1 left; T2's scope (if any) is still open
            let after_t1 = read();
            let err = match entered {
                Ok(guard) => {
                    drop(guard);
                    None
                }
                Err(e) => Some(e),
            };
            (inside, after_t1, err)
        })
        .unwrap();
    let (t1_inside, t1_still) = t1.join().unwrap();
    let (t2_inside, t2_after_t1, err) = t2.join().unwrap();
    assert_eq!(t1_inside, t1_still, "T1's value held while T2 tried");
    assert_eq!(
        t2_inside, t1_inside,
        "T2 saw T1's value (shared, or refused)"
    );
    if err.is_none() {
        assert_eq!(t2_after_t1, t1_inside, "T1 left first: T2 keeps the value");
    } else {
        assert_eq!(t2_after_t1, original, "T1 left, T2 held nothing: original");
    }
    assert_eq!(read(), original, "original back after both");
    assert_eq!(global_state(), before, "nothing else changed");
    err
}

fn matmul() -> String {
    format!("{} {}", matmul_precision(), allow_tf32())
}

#[test]
fn matmul_precision_from_two_threads() {
    let _s = serial();
    assert!(
        interleave(
            MatmulPrecision::new("high"),
            MatmulPrecision::new("high"),
            matmul
        )
        .is_none()
    );
    let e = interleave(
        MatmulPrecision::new("high"),
        MatmulPrecision::new("medium"),
        matmul,
    )
    .unwrap();
    assert_eq!(
        e.reason(),
        "matmul_precision(\"medium\") conflicts with matmul_precision(\"high\") held by thread worker-1"
    );
    assert_eq!(e.scope(), "matmul_precision(\"medium\")");
}

#[test]
fn tf32_from_two_threads_and_shared_with_its_matmul_spelling() {
    let _s = serial();
    assert!(interleave(Tf32(true), Tf32(true), matmul).is_none());
    assert!(interleave(Tf32(true), MatmulPrecision::new("high"), matmul).is_none());
    let e = interleave(Tf32(true), Tf32(false), matmul).unwrap();
    assert_eq!(
        e.reason(),
        "tf32(false) conflicts with tf32(true) held by thread worker-1"
    );
    let e = interleave(MatmulPrecision::new("medium"), Tf32(true), matmul).unwrap();
    assert_eq!(
        e.reason(),
        "tf32(true) conflicts with matmul_precision(\"medium\") held by thread worker-1"
    );
}

fn determinism() -> String {
    format!("{:?}", deterministic_mode())
}

#[test]
fn deterministic_from_two_threads() {
    let _s = serial();
    assert!(interleave(Deterministic::new(), Deterministic::new(), determinism).is_none());
    let e = interleave(
        Deterministic::new(),
        Deterministic::new().warn_only(true),
        determinism,
    )
    .unwrap();
    assert_eq!(
        e.reason(),
        "deterministic(warn_only) conflicts with deterministic held by thread worker-1"
    );
}

fn anomaly() -> String {
    format!("{:?}", anomaly_mode())
}

#[test]
fn detect_anomaly_from_two_threads() {
    let _s = serial();
    assert!(interleave(DetectAnomaly::new(), DetectAnomaly::new(), anomaly).is_none());
    let e = interleave(
        DetectAnomaly::new(),
        DetectAnomaly::new().check_nan(false),
        anomaly,
    )
    .unwrap();
    assert_eq!(
        e.reason(),
        "detect_anomaly(check_nan = false) conflicts with detect_anomaly held by thread worker-1"
    );
}

#[test]
fn threads_from_two_threads() {
    let _s = serial();
    // `threads()` reads the calling thread's count: each worker reads its
    // own, which the process value reaches only at entry/exit on that
    // thread; so the equal case compares what a fresh thread sees.
    let e = interleave(Threads(1), Threads(2), || {
        // T2 reads inside its own (refused) scope: the process value.
        String::new()
    })
    .unwrap();
    assert_eq!(
        e.reason(),
        "threads(2) conflicts with threads(1) held by thread worker-1"
    );
    let before = tch::get_num_threads();
    assert!(interleave(Threads(1), Threads(1), String::new).is_none());
    assert_eq!(tch::get_num_threads(), before);
}

fn cudnn() -> String {
    format!("{:?}", cudnn_flags())
}

#[test]
fn cudnn_from_two_threads() {
    let _s = serial();
    let bench = || Cudnn::new().benchmark(true);
    assert!(interleave(bench(), bench(), cudnn).is_none());
    let e = interleave(bench(), Cudnn::new().benchmark(false), cudnn).unwrap();
    assert_eq!(
        e.reason(),
        "cudnn(benchmark = false) conflicts with cudnn(benchmark = true) held by thread worker-1"
    );
}

#[test]
fn cudnn_flags_are_settings_of_their_own() {
    let _s = serial();
    let before = cudnn_flags();
    let barrier = Arc::new(Barrier::new(2));
    let b = Arc::clone(&barrier);
    let t = thread::spawn(move || {
        let g = Cudnn::new().benchmark(true).enter().unwrap();
        b.wait();
        b.wait();
        drop(g);
    });
    barrier.wait();
    let g = Cudnn::new().deterministic(true).enter().unwrap();
    let f = cudnn_flags();
    assert!(f.benchmark && f.deterministic);
    barrier.wait();
    t.join().unwrap();
    assert!(!cudnn_flags().benchmark && cudnn_flags().deterministic);
    drop(g);
    assert_eq!(cudnn_flags(), before);
}

fn sdpa() -> String {
    format!("{:?}", sdpa_backends())
}

#[test]
fn sdpa_from_two_threads() {
    let _s = serial();
    let math = || Sdpa::only([SdpaBackend::Math]);
    assert!(interleave(math(), math(), sdpa).is_none());
    let e = interleave(
        math(),
        Sdpa::only([SdpaBackend::Flash, SdpaBackend::Math]),
        sdpa,
    )
    .unwrap();
    assert_eq!(
        e.reason(),
        "sdpa(flash, math) conflicts with sdpa(math) held by thread worker-1"
    );
}

fn rand(n: i64) -> Vec<f32> {
    Vec::try_from(Tensor::rand([n], (Kind::Float, Device::Cpu))).unwrap()
}

fn draws() -> String {
    String::new()
}

#[test]
fn seed_and_fork_rng_from_two_threads_are_refused() {
    let _s = serial();
    tch::manual_seed(9);
    let _ = rand(4);
    let want = rand(6);
    tch::manual_seed(9);
    let _ = rand(4);
    let e = interleave(Seed(1), Seed(1), draws).unwrap();
    assert_eq!(
        e.reason(),
        "seed(1) conflicts with seed(1) held by thread worker-1"
    );
    let e = interleave(Seed(1), ForkRng, draws).unwrap();
    assert_eq!(
        e.reason(),
        "fork_rng conflicts with seed(1) held by thread worker-1"
    );
    let e = interleave(ForkRng, Seed(2), draws).unwrap();
    assert_eq!(
        e.reason(),
        "seed(2) conflicts with fork_rng held by thread worker-1"
    );
    assert_eq!(rand(6), want, "the stream is untouched by the scopes");
}

#[test]
fn seed_from_two_threads_one_after_the_other_draws_what_pytorch_draws() {
    let _s = serial();
    // One after the other, both threads get the seeded stream.
    let draw = || {
        thread::spawn(|| try_scoped!(seed(42) => rand(3)).unwrap())
            .join()
            .unwrap()
    };
    #[allow(clippy::excessive_precision, reason = "PyTorch 2.13's output")]
    let want: [f32; 3] = [0.8822692632675171, 0.9150039553642273, 0.38286375999450684];
    assert_eq!(draw(), want);
    assert_eq!(draw(), want);
}

#[test]
fn nesting_within_one_thread_works_as_before() {
    let _s = serial();
    let outer = MatmulPrecision::new("high").enter().unwrap();
    let inner = MatmulPrecision::new("medium").enter().unwrap();
    assert_eq!(matmul_precision(), "medium");
    // Out of order within the thread: the newest remaining value applies.
    drop(outer);
    assert_eq!(matmul_precision(), "medium");
    drop(inner);
    assert_eq!(matmul_precision(), "highest");
    // Nested seeds on one thread.
    let a = try_scoped!(seed(1) => try_scoped!(seed(2) => rand(2)).unwrap()).unwrap();
    let b = try_scoped!(seed(2) => rand(2)).unwrap();
    assert_eq!(a, b);
}

#[test]
fn a_third_thread_joins_a_shared_value_and_the_last_out_restores() {
    let _s = serial();
    let barrier = Arc::new(Barrier::new(3));
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let b = Arc::clone(&barrier);
            thread::spawn(move || {
                let g = Deterministic::new().enter().unwrap();
                b.wait();
                assert_eq!(deterministic_mode(), Some(false));
                // Leave in reverse of thread index, out of entry order.
                thread::sleep(std::time::Duration::from_millis(10 * (3 - i)));
                drop(g);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(deterministic_mode(), None);
}

/// A task holding `matmul_precision("high")` for its whole life (an
/// attributed async fn: the word is held by the `Spanned` future) moves
/// between tokio's workers and keeps holding it; another task asking for
/// `"medium"` meanwhile is refused, one asking for `"high"` shares it.
#[test]
fn a_task_keeps_its_value_while_it_moves_between_worker_threads() {
    let _s = serial();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .unwrap();

    #[tch_scope::matmul_precision("high")]
    async fn hold(rounds: usize) -> Result<Vec<(String, String)>, ScopeError> {
        let mut seen = Vec::new();
        for _ in 0..rounds {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            let name = thread::current().name().unwrap_or("?").to_owned();
            seen.push((name, matmul_precision().to_owned()));
        }
        Ok(seen)
    }

    #[tch_scope::matmul_precision("medium")]
    async fn other() -> Result<(), ScopeError> {
        Ok(())
    }

    #[tch_scope::matmul_precision("high")]
    async fn share() -> Result<&'static str, ScopeError> {
        tokio::task::yield_now().await;
        Ok(matmul_precision())
    }

    rt.block_on(async {
        let holder = tokio::spawn(hold(50));
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        let mut refused = 0;
        for _ in 0..20 {
            let e = tokio::spawn(other()).await.unwrap();
            let e = e.expect_err("another task's different value is refused");
            assert!(
                e.reason().starts_with(
                    "matmul_precision(\"medium\") conflicts with matmul_precision(\"high\") held by "
                ),
                "{e}"
            );
            refused += 1;
            assert_eq!(tokio::spawn(share()).await.unwrap().unwrap(), "high");
            tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        }
        assert_eq!(refused, 20);
        let seen = holder.await.unwrap().unwrap();
        assert!(seen.iter().all(|(_, p)| p == "high"), "{seen:?}");
        let threads: std::collections::BTreeSet<_> = seen.iter().map(|(t, _)| t).collect();
        // tokio names every worker alike; count distinct ids instead.
        assert!(!threads.is_empty());
    });
    assert_eq!(matmul_precision(), "highest");
    // Interleaved on one thread: two tasks are two holders.
    let local = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    local.block_on(async {
        let a = hold(5);
        let b = async {
            tokio::time::sleep(std::time::Duration::from_millis(3)).await;
            other().await
        };
        let (a, b) = tokio_join(a, b).await;
        assert!(a.unwrap().iter().all(|(_, p)| p == "high"));
        let e = b.expect_err("a task interleaved on the same thread is another holder");
        assert!(
            e.reason().contains("held by a task last polled on thread"),
            "{e}"
        );
    });
    assert_eq!(matmul_precision(), "highest");
}

/// Polls two futures on one task, interleaving them (tokio's `join!`
/// without the `macros` feature).
async fn tokio_join<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    let (mut a, mut b) = (Box::pin(a), Box::pin(b));
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(|cx| {
        if ra.is_none()
            && let std::task::Poll::Ready(v) = a.as_mut().poll(cx)
        {
            ra = Some(v);
        }
        if rb.is_none()
            && let std::task::Poll::Ready(v) = b.as_mut().poll(cx)
        {
            rb = Some(v);
        }
        if ra.is_some() && rb.is_some() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    (ra.unwrap(), rb.unwrap())
}

/// What `threads(n)` changes: the process value (read by threads at their
/// first parallel op) and the entering thread's count; a thread that ran an
/// op before keeps its own count.
#[test]
fn threads_reaches_new_threads_and_the_entering_one_only() {
    let _s = serial();
    let before = tch::get_num_threads();
    let op = || {
        let a = Tensor::ones([256, 256], (Kind::Float, Device::Cpu));
        let _ = a.matmul(&a);
    };
    let (go, done) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let (g2, d2) = (Arc::clone(&go), Arc::clone(&done));
    let old = thread::spawn(move || {
        op();
        let first = tch::get_num_threads();
        g2.wait(); // main enters threads(1)
        d2.wait();
        (first, tch::get_num_threads())
    });
    go.wait();
    let g = Threads(1).enter().unwrap();
    assert_eq!(tch::get_num_threads(), 1);
    let born = thread::spawn(move || {
        op();
        tch::get_num_threads()
    })
    .join()
    .unwrap();
    done.wait();
    let (old_first, old_inside) = old.join().unwrap();
    drop(g);
    assert_eq!(
        tch::get_num_threads(),
        before,
        "the entering thread restored"
    );
    assert_eq!(born, 1, "a thread born inside takes the scope's count");
    assert_eq!(
        old_inside, old_first,
        "a thread that ran an op before keeps its own count"
    );
    let after = thread::spawn(move || {
        op();
        tch::get_num_threads()
    })
    .join()
    .unwrap();
    assert_eq!(
        after, before,
        "a thread born after takes the restored count"
    );
}

#[test]
fn a_refused_entry_leaves_nothing_behind() {
    let _s = serial();
    let before = global_state();
    let barrier = Arc::new(Barrier::new(2));
    let b = Arc::clone(&barrier);
    let t = thread::spawn(move || {
        let g = Sdpa::only([SdpaBackend::Math]).enter().unwrap();
        b.wait();
        b.wait();
        drop(g);
    });
    barrier.wait();
    for _ in 0..3 {
        assert!(Sdpa::only([SdpaBackend::Flash]).enter().is_err());
    }
    assert_eq!(sdpa_backends(), [SdpaBackend::Math]);
    barrier.wait();
    t.join().unwrap();
    assert_eq!(global_state(), before);
    // The setting is free again.
    drop(Sdpa::only([SdpaBackend::Flash]).enter().unwrap());
}

/// The lock-free lane under contention: four threads entering and leaving
/// `detect_anomaly` and `deterministic` (one value each) as fast as they
/// can, each scope nested or in a loop, so that the lanes are taken from
/// their owners over and over (and stay on the lock after that); then
/// tasks doing the same across awaits on a multi-thread runtime and on a
/// current-thread runtime with a `LocalSet`. Inside every scope the mode is
/// on; after the last, everything is as before.
#[test]
fn many_threads_and_tasks_share_one_value_and_the_last_out_restores() {
    let _s = serial();
    let before = global_state();
    let barrier = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                for i in 0..20_000 {
                    let a = DetectAnomaly::new().enter().unwrap();
                    assert_eq!(anomaly_mode(), Some(true));
                    if (i + t) % 3 == 0 {
                        let d = Deterministic::new().enter().unwrap();
                        assert_eq!(deterministic_mode(), Some(false));
                        // Out of order: the outer scope ends first.
                        drop(a);
                        assert_eq!(deterministic_mode(), Some(false));
                        drop(d);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(global_state(), before);

    #[tch_scope::detect_anomaly]
    async fn hold(rounds: usize) -> Result<usize, ScopeError> {
        let mut on = 0;
        for _ in 0..rounds {
            tokio::task::yield_now().await;
            on += usize::from(anomaly_mode() == Some(true));
        }
        Ok(on)
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let on: usize = rt.block_on(async {
        let tasks: Vec<_> = (0..32).map(|_| tokio::spawn(hold(50))).collect();
        let mut on = 0;
        for t in tasks {
            on += t.await.unwrap().unwrap();
        }
        on
    });
    assert_eq!(on, 32 * 50, "the mode was on at every poll");
    assert_eq!(global_state(), before);

    let local = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let on: usize = tokio::task::LocalSet::new().block_on(&local, async {
        let tasks: Vec<_> = (0..8).map(|_| tokio::task::spawn_local(hold(50))).collect();
        let mut on = 0;
        for t in tasks {
            on += t.await.unwrap().unwrap();
        }
        on
    });
    assert_eq!(on, 8 * 50);
    assert_eq!(global_state(), before);
}
