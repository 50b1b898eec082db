//! Stress: 8 threads, each entering and leaving many randomly nested
//! scopes (every per-thread word, a custom `with(..)` scope, conditional
//! and list forms, a `ScopeStack`), leaving them by the end of the block,
//! `?`, `break`, and panics caught at random depths. Inside every scope the
//! thread's state is what a model of the nesting says; after every exit it
//! is what it was before; at the end it is what the thread started with.
//! The async half does the same with many futures interleaved on a small
//! round-robin executor per thread, some dropped mid-flight. A third part
//! has 8 threads enter and leave process-wide words (`matmul_precision`,
//! `tf32`, `sdpa`, `cudnn`, `deterministic`) at random, in any order,
//! always with equal values: each value holds while its scope is open, and
//! the process's settings are back at the end.
//!
//! `TCH_SCOPE_STRESS_SCOPES` sets the scopes entered per thread (sync and
//! async each); the default (100 000) takes seconds in debug.
//! `make stress` runs 1 000 000 per thread in release.

use std::cell::Cell;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tch::{Device, Kind};
use tch_scope::{
    AutocastDevice, EnableGrad, NoGrad, Scope, ScopeStack, autocast_dtype, current_device,
    is_grad_enabled, is_inference_mode_enabled, scoped, try_scoped,
};

const THREADS: usize = 8;
const MAX_DEPTH: u32 = 10;

fn scopes_per_thread() -> u64 {
    std::env::var("TCH_SCOPE_STRESS_SCOPES")
        .map(|n| n.replace('_', "").parse().expect("a number"))
        .unwrap_or(100_000)
}

/// xorshift64*, seeded per thread, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

thread_local! {
    /// Depth of the custom `with(Depth)` scope on this thread.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Awaiting scopes entered by this thread's tasks.
    static ASYNC_ENTERED: Cell<u64> = const { Cell::new(0) };
}

/// A user scope: a thread-local counter, up on entry, down on exit.
struct Depth;
struct DepthGuard;

impl Scope for Depth {
    type Guard = DepthGuard;
    type Error = tch_scope::ScopeError;
    fn enter(&mut self) -> Result<DepthGuard, tch_scope::ScopeError> {
        DEPTH.with(|d| d.set(d.get() + 1));
        Ok(DepthGuard)
    }
}

impl Drop for DepthGuard {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get() - 1));
    }
}

/// What the thread's state must be: the model the test checks against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Expect {
    grad: bool,
    inference: bool,
    device: Device,
    autocast: Option<Kind>,
    depth: u32,
}

impl Expect {
    fn now() -> Self {
        Expect {
            grad: is_grad_enabled(),
            inference: is_inference_mode_enabled(),
            device: current_device(),
            autocast: autocast_dtype(AutocastDevice::Cpu),
            depth: DEPTH.with(Cell::get),
        }
    }
}

#[track_caller]
fn check(want: &Expect) {
    assert_eq!(&Expect::now(), want);
}

/// A small tensor for the deadline cases.
fn tiny() -> tch::Tensor {
    tch::Tensor::zeros([2], (Kind::Float, Device::Cpu))
}

/// A panic payload of our own, so the hook stays quiet about it.
struct Boom;

/// An early exit carried by `?` up to a random ancestor.
struct Early;

fn quiet_booms() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<Boom>().is_none() {
            default(info);
        }
    }));
}

/// Counts of what happened, summed over threads.
struct Counts {
    entered: AtomicU64,
    panics: AtomicU64,
    early: AtomicU64,
    breaks: AtomicU64,
    cancelled: AtomicU64,
}

static SYNC: Counts = Counts {
    entered: AtomicU64::new(0),
    panics: AtomicU64::new(0),
    early: AtomicU64::new(0),
    breaks: AtomicU64::new(0),
    cancelled: AtomicU64::new(0),
};

// ---- sync ----------------------------------------------------------------------

struct Walk {
    rng: Rng,
    budget: u64,
}

impl Walk {
    /// The body of a scope: checks the state, then enters 0–3 children,
    /// catching some of their panics and early exits, or exits itself.
    fn body(&mut self, depth: u32, want: &Expect) -> Result<(), Early> {
        check(want);
        if self.rng.one_in(60) {
            SYNC.panics.fetch_add(1, Ordering::Relaxed);
            std::panic::panic_any(Boom);
        }
        if self.rng.one_in(40) {
            SYNC.early.fetch_add(1, Ordering::Relaxed);
            return Err(Early);
        }
        if depth >= MAX_DEPTH {
            return Ok(());
        }
        for _ in 0..self.rng.below(4) {
            if self.budget == 0 {
                break;
            }
            match self.rng.below(4) {
                0 => {
                    let r = catch_unwind(AssertUnwindSafe(|| self.child(depth, want)));
                    check(want);
                    if let Err(payload) = r {
                        assert!(payload.is::<Boom>(), "a panic that is not ours");
                    }
                }
                1 => {
                    let _ = self.child(depth, want);
                    check(want);
                }
                _ => self.child(depth, want)?,
            }
            check(want);
        }
        Ok(())
    }

    /// Enters one random scope around `body`.
    fn child(&mut self, depth: u32, want: &Expect) -> Result<(), Early> {
        self.budget -= 1;
        SYNC.entered.fetch_add(1, Ordering::Relaxed);
        let d = depth + 1;
        let w = *want;
        match self.rng.below(16) {
            0 => scoped!(no_grad => self.body(d, &Expect { grad: false, ..w })?),
            1 => scoped!(enable_grad => self.body(d, &Expect { grad: true, ..w })?),
            2 => {
                let on = self.rng.one_in(2);
                scoped!(grad(on) => self.body(d, &Expect { grad: on, ..w })?)
            }
            3 => scoped!(inference_mode => {
                self.body(d, &Expect { grad: false, inference: true, ..w })?
            }),
            4 => scoped!(device(cpu) => self.body(d, &Expect { device: Device::Cpu, ..w })?),
            5 => scoped!(autocast(cpu, bf16) => {
                self.body(d, &Expect { autocast: Some(Kind::BFloat16), ..w })?
            }),
            6 => scoped!(autocast(cpu, f16) => {
                self.body(d, &Expect { autocast: Some(Kind::Half), ..w })?
            }),
            7 => scoped!(with(Depth) => self.body(d, &Expect { depth: w.depth + 1, ..w })?),
            8 => {
                let c = self.rng.one_in(2);
                let grad = if c { false } else { w.grad };
                scoped!(no_grad if c => self.body(d, &Expect { grad, ..w })?)
            }
            9 => scoped!(record("stress") => self.body(d, &w)?),
            10 => scoped!(enable_grad, inference_mode, with(Depth) => {
                let e = Expect { grad: false, inference: true, depth: w.depth + 1, ..w };
                self.body(d, &e)?
            }),
            11 => {
                // Scopes chosen at run time, like contextlib.ExitStack.
                let mut stack = ScopeStack::new();
                let mut e = w;
                for _ in 0..=self.rng.below(3) {
                    if self.rng.one_in(2) {
                        stack.enter(NoGrad).unwrap();
                        e.grad = false;
                    } else {
                        stack.enter(EnableGrad).unwrap();
                        e.grad = true;
                    }
                }
                if self.rng.one_in(2) {
                    stack.enter(Depth).unwrap();
                    e.depth += 1;
                }
                self.body(d, &e)?;
            }
            12 => {
                // `break` out of a loop from inside a scope.
                for _ in 0..3 {
                    scoped!(no_grad, with(Depth) => {
                        self.body(d, &Expect { grad: false, depth: w.depth + 1, ..w })?;
                        if self.rng.one_in(2) {
                            SYNC.breaks.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    });
                }
            }
            14 => {
                // A deadline that never passes refuses nothing, and lets
                // panics and early exits of its body through as they were.
                let r = try_scoped!(deadline(Duration::from_secs(3600)) => {
                    assert!(tiny().f_relu().is_ok());
                    self.body(d, &w)
                });
                r.expect("the deadline never passes")?;
            }
            15 => {
                // One that has passed refuses the body's operator, whatever
                // the deadlines around it; once left, operators run again.
                let r = try_scoped!(deadline(Duration::ZERO) => tiny().f_relu().is_ok());
                assert!(r.is_err_and(|e| e.is_ended()));
                assert!(tiny().f_relu().is_ok());
                self.body(d, &w)?;
            }
            _ => {
                // A scope entered and left within a single statement.
                let grad = scoped!(no_grad => is_grad_enabled());
                assert!(!grad);
                self.body(d, &w)?;
            }
        }
        Ok(())
    }
}

fn sync_thread(seed: u64, budget: u64) {
    let start = Expect::now();
    let mut walk = Walk {
        rng: Rng::new(seed),
        budget,
    };
    while walk.budget > 0 {
        let r = catch_unwind(AssertUnwindSafe(|| walk.child(0, &start)));
        if let Err(payload) = r {
            assert!(payload.is::<Boom>(), "a panic that is not ours");
        }
        check(&start);
    }
    check(&start);
}

#[test]
fn eight_threads_of_random_nested_scopes_restore_everything() {
    quiet_booms();
    let n = scopes_per_thread();
    let t = Instant::now();
    let threads: Vec<_> = (0..THREADS as u64)
        .map(|i| std::thread::spawn(move || sync_thread(i + 1, n)))
        .collect();
    for t in threads {
        t.join().expect("a stress thread failed");
    }
    eprintln!(
        "stress (sync): {THREADS} threads x {n} scopes in {:.1?}: {} entered, {} panics caught, \
         {} early returns (?), {} breaks",
        t.elapsed(),
        SYNC.entered.load(Ordering::Relaxed),
        SYNC.panics.load(Ordering::Relaxed),
        SYNC.early.load(Ordering::Relaxed),
        SYNC.breaks.load(Ordering::Relaxed),
    );
    assert_eq!(SYNC.entered.load(Ordering::Relaxed), n * THREADS as u64);
}

// ---- async ---------------------------------------------------------------------

static ASYNC: Counts = Counts {
    entered: AtomicU64::new(0),
    panics: AtomicU64::new(0),
    early: AtomicU64::new(0),
    breaks: AtomicU64::new(0),
    cancelled: AtomicU64::new(0),
};

/// Pending `n` times, then ready: lets the executor run other tasks.
struct Yield(u32);

impl Future for Yield {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            Poll::Ready(())
        } else {
            self.0 -= 1;
            Poll::Pending
        }
    }
}

type Task = Pin<Box<dyn Future<Output = ()>>>;

/// A task: 1–3 steps, each a yield or a random awaiting scope around a
/// nested task; the state is checked after every `.await`.
fn task(seed: u64, depth: u32, want: Expect) -> Task {
    Box::pin(async move {
        let mut rng = Rng::new(seed);
        for _ in 0..=rng.below(3) {
            check(&want);
            let yields = rng.below(3) as u32;
            let inner = rng.next();
            if depth >= MAX_DEPTH / 2 || rng.one_in(4) {
                Yield(yields).await;
                check(&want);
                continue;
            }
            ASYNC.entered.fetch_add(1, Ordering::Relaxed);
            ASYNC_ENTERED.with(|n| n.set(n.get() + 1));
            let d = depth + 1;
            let w = want;
            match rng.below(7) {
                0 => scoped!(no_grad => {
                    let e = Expect { grad: false, ..w };
                    Yield(yields).await;
                    check(&e);
                    task(inner, d, e).await;
                    check(&e);
                }),
                1 => scoped!(enable_grad => {
                    let e = Expect { grad: true, ..w };
                    task(inner, d, e).await;
                    Yield(yields).await;
                    check(&e);
                }),
                2 => scoped!(inference_mode => {
                    let e = Expect { grad: false, inference: true, ..w };
                    Yield(yields).await;
                    task(inner, d, e).await;
                    check(&e);
                }),
                3 => scoped!(autocast(cpu, bf16), device(cpu) => {
                    let e = Expect { autocast: Some(Kind::BFloat16), device: Device::Cpu, ..w };
                    task(inner, d, e).await;
                    check(&e);
                }),
                4 => scoped!(with(Depth) => {
                    let e = Expect { depth: w.depth + 1, ..w };
                    Yield(yields).await;
                    task(inner, d, e).await;
                    check(&e);
                }),
                5 => {
                    // An attribute-style scoped future, via the extension trait.
                    use tch_scope::ScopeFutureExt;
                    let e = Expect { grad: false, ..w };
                    task(inner, d, e).in_scope(NoGrad).await;
                }
                _ => scoped!(grad(false), autocast(cpu, f16) => {
                    let e = Expect { grad: false, autocast: Some(Kind::Half), ..w };
                    Yield(yields).await;
                    task(inner, d, e).await;
                    check(&e);
                }),
            }
            check(&want);
        }
    })
}

/// Round-robin over up to `live` tasks at a time, spawning new ones until
/// the tasks have entered `budget` scopes; between any two polls the
/// thread's state is the base state (nothing leaked out of a poll). One
/// poll in 200 drops its task mid-flight instead.
fn async_thread(seed: u64, budget: u64, live: usize) {
    let base = Expect::now();
    let mut rng = Rng::new(seed ^ 0xa5a5);
    let mut cx = Context::from_waker(Waker::noop());
    let mut tasks: Vec<Task> = Vec::new();
    let entered = || ASYNC_ENTERED.with(Cell::get);
    while entered() < budget || !tasks.is_empty() {
        while tasks.len() < live && entered() < budget {
            tasks.push(task(rng.next(), 0, base));
        }
        let mut i = 0;
        while i < tasks.len() {
            if rng.one_in(200) {
                ASYNC.cancelled.fetch_add(1, Ordering::Relaxed);
                drop(tasks.swap_remove(i));
                check(&base);
                continue;
            }
            let done = tasks[i].as_mut().poll(&mut cx).is_ready();
            check(&base);
            if done {
                drop(tasks.swap_remove(i));
            } else {
                i += 1;
            }
        }
    }
    check(&base);
}

#[test]
fn many_futures_interleaved_on_small_executors_restore_everything() {
    let n = scopes_per_thread();
    let t = Instant::now();
    let threads: Vec<_> = (0..THREADS as u64)
        .map(|i| std::thread::spawn(move || async_thread(i + 100, n, 64)))
        .collect();
    for t in threads {
        t.join().expect("an async stress thread failed");
    }
    assert!(ASYNC.entered.load(Ordering::Relaxed) >= n * THREADS as u64);
    eprintln!(
        "stress (async): {THREADS} threads x 64 live futures in {:.1?}: {} scopes entered, \
         {} futures dropped mid-flight",
        t.elapsed(),
        ASYNC.entered.load(Ordering::Relaxed),
        ASYNC.cancelled.load(Ordering::Relaxed),
    );
}

// ---- process-wide words ------------------------------------------------------------

/// The process-wide words the stress enters, each always with the same
/// value (so threads share it): `matmul_precision("high")` and `tf32(true)`
/// are one setting with one value.
const GLOBAL_WORDS: u64 = 5;

fn enter_global(which: u64) -> Box<dyn std::any::Any> {
    use tch_scope::{Cudnn, Deterministic, MatmulPrecision, Sdpa, SdpaBackend, Tf32};
    match which {
        0 => Box::new(MatmulPrecision::new("high").enter().unwrap()),
        1 => Box::new(Tf32(true).enter().unwrap()),
        2 => Box::new(Sdpa::only([SdpaBackend::Math]).enter().unwrap()),
        3 => Box::new(Cudnn::new().benchmark(true).enter().unwrap()),
        _ => Box::new(Deterministic::new().warn_only(true).enter().unwrap()),
    }
}

fn global_holds(which: u64) -> bool {
    match which {
        0 | 1 => tch_scope::matmul_precision() == "high" && tch_scope::allow_tf32(),
        2 => tch_scope::sdpa_backends() == [tch_scope::SdpaBackend::Math],
        3 => tch_scope::cudnn_flags().benchmark,
        _ => tch_scope::deterministic_mode() == Some(true),
    }
}

fn global_state() -> String {
    format!(
        "{} {} {:?} {:?} {:?}",
        tch_scope::matmul_precision(),
        tch_scope::allow_tf32(),
        tch_scope::sdpa_backends(),
        tch_scope::cudnn_flags(),
        tch_scope::deterministic_mode()
    )
}

static GLOBAL_ENTERED: AtomicU64 = AtomicU64::new(0);

/// Enters up to 3 random words, checks each holds, leaves them in a random
/// order (sometimes by a panic), checks nothing is lost meanwhile.
fn global_thread(seed: u64, rounds: u64) {
    let mut rng = Rng::new(seed);
    for _ in 0..rounds {
        let n = 1 + rng.below(3);
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut held = Vec::new();
            for _ in 0..n {
                let w = rng.below(GLOBAL_WORDS);
                held.push((w, enter_global(w)));
                GLOBAL_ENTERED.fetch_add(1, Ordering::Relaxed);
                for (w, _) in &held {
                    assert!(global_holds(*w), "word {w} lost its value");
                }
            }
            // Out of order: a random one first.
            while !held.is_empty() {
                let i = rng.below(held.len() as u64) as usize;
                drop(held.swap_remove(i));
                for (w, _) in &held {
                    assert!(global_holds(*w), "word {w} lost its value");
                }
            }
            if rng.one_in(16) {
                let _g = enter_global(rng.below(GLOBAL_WORDS));
                std::panic::panic_any(Boom);
            }
        }));
        if let Err(payload) = r {
            assert!(payload.is::<Boom>(), "a panic that is not ours");
        }
    }
}

/// Process-wide words entered and left at random on 8 threads, always
/// with equal values: never refused, every value holds while its scope is
/// open, and the process is back to its settings at the end.
#[test]
fn eight_threads_entering_process_wide_words_at_random_restore_the_process() {
    quiet_booms();
    let before = global_state();
    let rounds = (scopes_per_thread() / 20).max(100);
    let t = Instant::now();
    let threads: Vec<_> = (0..THREADS as u64)
        .map(|i| std::thread::spawn(move || global_thread(i + 100, rounds)))
        .collect();
    for t in threads {
        t.join().expect("a process-wide stress thread failed");
    }
    eprintln!(
        "stress (process-wide): {THREADS} threads x {rounds} rounds in {:.1?}: {} scopes entered",
        t.elapsed(),
        GLOBAL_ENTERED.load(Ordering::Relaxed)
    );
    assert_eq!(
        global_state(),
        before,
        "the process is back to its settings"
    );
}
