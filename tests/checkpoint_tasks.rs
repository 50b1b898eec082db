//! Checkpoints in tasks that share threads: each task's metrics go to its
//! own checkpoint, however its polls interleave with other tasks' polls —
//! futures polled in turn by hand, a current-thread runtime with a
//! `LocalSet`, a multi-thread runtime where tasks move between threads —
//! and a deadline another task trips is not this task's failure.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};

use tch::{Device, Kind, Tensor};
use tch_scope::{Metrics, log_metric, metrics, scoped, try_scoped};

use crate::{in_child, saved_metrics, scratch, small_vs};

/// Pending once, then ready: a suspension point for hand-polled futures.
#[derive(Default)]
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

fn poll_once<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

/// `value` logged `times` times under "loss" and once under `name`, with
/// a suspension (`pause`) between every two logs.
async fn log_with_pauses<P: Future<Output = ()>>(
    path: &Path,
    name: &str,
    value: f64,
    times: usize,
    pause: impl Fn() -> P,
) -> Metrics {
    let vs = small_vs();
    try_scoped!(checkpoint(vs, path) => {
        for _ in 0..times {
            log_metric("loss", value);
            pause().await;
        }
        log_metric(name, value);
        pause().await;
        metrics().unwrap()
    })
    .unwrap()
}

/// The log `log_with_pauses(_, name, value, times, _)` writes.
fn own(name: &str, value: f64, times: usize) -> Vec<(String, Vec<f64>)> {
    let mut want = vec![("loss".to_owned(), vec![value; times])];
    want.push((name.to_owned(), vec![value]));
    want.sort_by(|x, y| x.0.cmp(&y.0));
    want
}

fn entries(m: &Metrics) -> Vec<(String, Vec<f64>)> {
    m.names()
        .map(|n| (n.to_owned(), m.get(n).to_vec()))
        .collect()
}

/// Two futures polled in turn on one thread with a no-op waker: each file
/// holds its own task's metrics and nothing else.
#[test]
fn hand_polled_tasks_log_into_their_own_checkpoints() {
    if in_child() {
        return;
    }
    let dir = scratch("tasks-by-hand");
    let (pa, pb) = (dir.join("a.ot"), dir.join("b.ot"));
    let mut a = pin!(log_with_pauses(&pa, "a", 1.0, 3, YieldOnce::default));
    let mut b = pin!(log_with_pauses(&pb, "b", 2.0, 3, YieldOnce::default));
    let (mut seen_a, mut seen_b) = (None, None);
    let mut open_between = vec![];
    while seen_a.is_none() || seen_b.is_none() {
        if seen_a.is_none()
            && let Poll::Ready(m) = poll_once(a.as_mut())
        {
            seen_a = Some(m);
        }
        if seen_b.is_none()
            && let Poll::Ready(m) = poll_once(b.as_mut())
        {
            seen_b = Some(m);
        }
        open_between.push(metrics());
    }
    assert_eq!(entries(&seen_a.unwrap()), own("a", 1.0, 3), "a, inside");
    assert_eq!(entries(&seen_b.unwrap()), own("b", 2.0, 3), "b, inside");
    assert_eq!(entries(&saved_metrics(&pa)), own("a", 1.0, 3), "file a");
    assert_eq!(entries(&saved_metrics(&pb)), own("b", 2.0, 3), "file b");
    assert!(
        open_between.iter().all(Option::is_none),
        "no checkpoint stays open on the thread between polls: {open_between:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Nesting across tasks: task a has a checkpoint inside a checkpoint,
/// task b one of its own, polled in turn, and a synchronous checkpoint
/// around all the polls. Each log goes to the innermost checkpoint of the
/// task that logs it.
#[test]
fn nested_checkpoints_in_interleaved_tasks_keep_their_order() {
    if in_child() {
        return;
    }
    let dir = scratch("tasks-nested");
    let (outer, inner, other, around) = (
        dir.join("outer.ot"),
        dir.join("inner.ot"),
        dir.join("other.ot"),
        dir.join("around.ot"),
    );
    let (vs_a, vs_b, vs_c, vs_d) = (small_vs(), small_vs(), small_vs(), small_vs());
    let a = async {
        try_scoped!(checkpoint(vs_a, &outer) => {
            log_metric("outer", 1.0);
            YieldOnce::default().await;
            try_scoped!(checkpoint(vs_b, &inner) => {
                log_metric("inner", 2.0);
                YieldOnce::default().await;
                log_metric("inner", 3.0);
            })
            .unwrap();
            YieldOnce::default().await;
            log_metric("outer", 4.0);
        })
        .unwrap();
    };
    let b = async {
        try_scoped!(checkpoint(vs_c, &other) => {
            for v in [10.0, 11.0, 12.0, 13.0] {
                log_metric("other", v);
                YieldOnce::default().await;
            }
        })
        .unwrap();
    };
    scoped!(checkpoint(vs_d, &around) => {
        log_metric("around", 100.0);
        let (mut a, mut b) = (pin!(a), pin!(b));
        let (mut a_done, mut b_done) = (false, false);
        while !(a_done && b_done) {
            a_done = a_done || poll_once(a.as_mut()).is_ready();
            b_done = b_done || poll_once(b.as_mut()).is_ready();
            log_metric("around", 101.0);
        }
    });
    let log = |p: &Path| entries(&saved_metrics(p));
    let one = |n: &str, v: &[f64]| vec![(n.to_owned(), v.to_vec())];
    assert_eq!(log(&outer), one("outer", &[1.0, 4.0]));
    assert_eq!(log(&inner), one("inner", &[2.0, 3.0]));
    assert_eq!(log(&other), one("other", &[10.0, 11.0, 12.0, 13.0]));
    let around = saved_metrics(&around);
    assert_eq!(around.names().collect::<Vec<_>>(), ["around"]);
    assert_eq!(around.get("around")[0], 100.0);
    assert!(around.get("around")[1..].iter().all(|&v| v == 101.0));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A current-thread runtime with a `LocalSet`: tasks spawned with
/// `spawn_local` take turns on one thread at every `yield_now`.
#[test]
fn local_set_tasks_log_into_their_own_checkpoints() {
    if in_child() {
        return;
    }
    let dir = scratch("tasks-local-set");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let paths: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("t{i}.ot"))).collect();
    let inside = tokio::task::LocalSet::new().block_on(&rt, async {
        let tasks: Vec<_> = paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let p = p.clone();
                tokio::task::spawn_local(async move {
                    let name = format!("t{i}");
                    log_with_pauses(&p, &name, i as f64, 5, tokio::task::yield_now).await
                })
            })
            .collect();
        let mut inside = vec![];
        for t in tasks {
            inside.push(t.await.unwrap());
        }
        inside
    });
    for (i, (p, m)) in paths.iter().zip(&inside).enumerate() {
        let want = own(&format!("t{i}"), i as f64, 5);
        assert_eq!(entries(m), want, "task {i}, inside");
        assert_eq!(entries(&saved_metrics(p)), want, "file {i}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A multi-thread runtime: more tasks than workers, each yielding between
/// logs, so tasks move between threads and share them. An
/// `async fn` with a `checkpoint` is `Send`.
#[test]
fn tasks_that_move_threads_log_into_their_own_checkpoints() {
    if in_child() {
        return;
    }
    let dir = scratch("tasks-multi-thread");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(3)
        .build()
        .unwrap();
    let paths: Vec<PathBuf> = (0..12).map(|i| dir.join(format!("t{i}.ot"))).collect();
    let (inside, threads) = rt.block_on(async {
        let tasks: Vec<_> = paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let p = p.clone();
                tokio::spawn(async move {
                    let name = format!("t{i}");
                    let vs = small_vs();
                    let mut threads = std::collections::HashSet::new();
                    let m = try_scoped!(checkpoint(vs, &p) => {
                        for _ in 0..20 {
                            threads.insert(std::thread::current().id());
                            log_metric("loss", i as f64);
                            tokio::task::yield_now().await;
                        }
                        log_metric(&name, i as f64);
                        metrics().unwrap()
                    })
                    .unwrap();
                    (m, threads.len())
                })
            })
            .collect();
        let (mut inside, mut threads) = (vec![], 0);
        for t in tasks {
            let (m, n) = t.await.unwrap();
            inside.push(m);
            threads = threads.max(n);
        }
        (inside, threads)
    });
    for (i, (p, m)) in paths.iter().zip(&inside).enumerate() {
        let want = own(&format!("t{i}"), i as f64, 20);
        assert_eq!(entries(m), want, "task {i}, inside");
        assert_eq!(entries(&saved_metrics(p)), want, "file {i}");
    }
    // Not asserted (the scheduler decides), but shown when a run fails.
    eprintln!("a task ran on at most {threads} threads");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One task polled by hand on three threads in turn, each with a
/// synchronous checkpoint of its own open around the poll: the task's logs
/// go to the task's checkpoint on every thread, each thread's to its own.
#[test]
fn a_task_polled_on_other_threads_takes_its_checkpoint_along() {
    if in_child() {
        return;
    }
    let dir = scratch("tasks-by-hand-threads");
    let task_path = dir.join("task.ot");
    let vs = small_vs();
    let mut task = Box::pin(async {
        try_scoped!(checkpoint(vs, &task_path) => {
            for v in [1.0, 2.0, 3.0] {
                log_metric("task", v);
                YieldOnce::default().await;
            }
        })
        .unwrap();
    });
    std::thread::scope(|s| {
        for t in 0..4 {
            let around = dir.join(format!("thread{t}.ot"));
            let polled = s
                .spawn(move || {
                    let vs = small_vs();
                    scoped!(checkpoint(vs, &around) => {
                        log_metric("thread", f64::from(t));
                        let ready = poll_once(task.as_mut()).is_ready();
                        log_metric("thread", f64::from(t));
                        (task, ready)
                    })
                })
                .join()
                .unwrap();
            task = polled.0;
            assert_eq!(polled.1, t == 3, "ready at the fourth poll");
        }
    });
    assert_eq!(
        entries(&saved_metrics(&task_path)),
        [("task".to_owned(), vec![1.0, 2.0, 3.0])]
    );
    for t in 0..4 {
        assert_eq!(
            entries(&saved_metrics(&dir.join(format!("thread{t}.ot")))),
            [("thread".to_owned(), vec![f64::from(t); 2])],
            "thread {t}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `save_on_failure = false` in one task, and in another task polled on
/// the same thread meanwhile, an operator refused by a passed deadline:
/// that is the other task's failure, not this one's, which saves.
#[test]
fn a_deadline_tripped_in_another_task_is_not_this_checkpoints_failure() {
    if in_child() {
        return;
    }
    let dir = scratch("tasks-deadline");
    let path = dir.join("model.ot");
    let vs = small_vs();
    let a = async {
        try_scoped!(checkpoint(vs, &path, save_on_failure = false) => {
            log_metric("loss", 1.0);
            YieldOnce::default().await;
            log_metric("loss", 2.0);
        })
        .unwrap();
    };
    let b = async {
        YieldOnce::default().await;
        let refused = try_scoped!(deadline(std::time::Duration::ZERO) => {
            Tensor::f_zeros([2], (Kind::Float, Device::Cpu)).is_err()
        });
        assert!(refused.is_err(), "the deadline refused the operator");
    };
    let (mut a, mut b) = (pin!(a), pin!(b));
    assert!(poll_once(a.as_mut()).is_pending());
    assert!(poll_once(b.as_mut()).is_pending());
    assert!(poll_once(b.as_mut()).is_ready());
    assert!(poll_once(a.as_mut()).is_ready());
    assert_eq!(
        entries(&saved_metrics(&path)),
        [("loss".to_owned(), vec![1.0, 2.0])],
        "a completed, so it saved"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
