//! Fault injection: the shim's test-only switch
//! (`tch_scope::__private::inject_fault`) makes a named C++ call fail, and
//! real faults (a folder removed under a checkpoint or a profile) do the
//! same from outside. Leaving a scope whose restore fails must not panic or
//! abort while a panic unwinds, nor in a plain drop: the error reaches the
//! exit hook, naming the scope and the reason, and the program carries on.
//! On the success path of `try_scoped!` the caller gets it as the `Err`
//! (and `scoped!` panics with it), the hook nothing. Entering
//! a scope that fails is a `ScopeError`, with nothing left changed.
//!
//! A process of its own: the exit hook and some of the state (RNG,
//! deterministic algorithms, the profiler) are process-wide, so the tests
//! run one at a time (`serial()`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, MutexGuard};

use tch::nn::{self, VarStore};
use tch::{CModule, Device, Kind, Tensor};
use tch_scope::__private::inject_fault;
use tch_scope::{
    ExitError, Mode, Scope, Trainable, autocast_dtype, deterministic_mode, exit_errors_reported,
    scoped, try_scoped,
};

static SEEN: Mutex<Vec<ExitError>> = Mutex::new(Vec::new());

/// One test at a time, with a hook that records every exit error.
struct Capture(#[allow(dead_code, reason = "held for its drop")] MutexGuard<'static, ()>);

fn capture() -> Capture {
    static LOCK: Mutex<()> = Mutex::new(());
    let lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    SEEN.lock().unwrap().clear();
    tch_scope::set_exit_hook(|e| SEEN.lock().unwrap().push(e.clone()));
    Capture(lock)
}

impl Capture {
    /// The errors seen so far, as (scope, reason), emptying the record.
    fn take(&self) -> Vec<(String, String)> {
        std::mem::take(&mut *SEEN.lock().unwrap())
            .into_iter()
            .map(|e| (e.scope().to_owned(), e.reason().to_owned()))
            .collect()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        inject_fault("*", 0);
        tch_scope::reset_exit_hook();
    }
}

fn rand(n: i64) -> Vec<f32> {
    Vec::try_from(Tensor::rand([n], (Kind::Float, Device::Cpu))).unwrap()
}

/// The success path of `try_scoped!` gave the exit error back; the hook
/// heard nothing.
#[track_caller]
fn assert_returned<T: std::fmt::Debug>(
    c: &Capture,
    r: Result<T, tch_scope::ScopeError>,
    scope: &str,
    reason_has: &str,
) {
    let e = r.unwrap_err();
    assert!(e.is_ended(), "{e}");
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("could not leave `{scope}` cleanly: ")),
        "{msg}"
    );
    assert!(msg.contains(reason_has), "{msg}");
    assert!(c.take().is_empty());
}

fn injected(op: &str) -> String {
    format!("injected fault in {op}")
}

#[track_caller]
fn assert_one(seen: Vec<(String, String)>, scope: &str, reason_has: &str) {
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, scope, "{seen:?}");
    assert!(seen[0].1.contains(reason_has), "{seen:?}");
}

// ---- exits that fail -----------------------------------------------------------

#[test]
fn rng_restore_failure_reaches_the_hook() {
    let c = capture();
    let before = exit_errors_reported();
    for word in ["fork_rng", "seed"] {
        // A plain drop: the hook.
        let guard = match word {
            "fork_rng" => tch_scope::ForkRng.enter(),
            _ => tch_scope::Seed(7).enter(),
        }
        .unwrap();
        let drawn = rand(3);
        inject_fault("tch_scope_rng_restore", 1);
        drop(guard);
        assert_eq!(drawn.len(), 3);
        assert_one(c.take(), word, &injected("tch_scope_rng_restore"));
        // The success path of try_scoped!: the caller.
        let r = match word {
            "fork_rng" => try_scoped!(fork_rng => {
                inject_fault("tch_scope_rng_restore", 1);
                rand(3)
            }),
            _ => try_scoped!(seed(7) => {
                inject_fault("tch_scope_rng_restore", 1);
                rand(3)
            }),
        };
        assert_returned(&c, r, word, &injected("tch_scope_rng_restore"));
    }
    assert_eq!(exit_errors_reported() - before, 2);
    // The switch fired once each: the next scope leaves cleanly.
    scoped!(fork_rng => rand(1));
    assert!(c.take().is_empty());
}

#[test]
fn autocast_exit_failure_reaches_the_hook() {
    let c = capture();
    let r = try_scoped!(autocast(cpu, bf16) => {
        inject_fault("tch_scope_autocast_exit", 1);
        assert_eq!(autocast_dtype(tch_scope::AutocastDevice::Cpu), Some(Kind::BFloat16));
    });
    assert_returned(&c, r, "autocast", &injected("tch_scope_autocast_exit"));
    let p = catch_unwind(|| {
        scoped!(autocast(cpu, bf16) => inject_fault("tch_scope_autocast_exit", 1));
    })
    .unwrap_err();
    let p = p.downcast_ref::<String>().unwrap();
    assert!(p.starts_with("could not leave `autocast` cleanly"), "{p}");
    assert!(c.take().is_empty());
    let g = tch_scope::Autocast::cpu(Kind::BFloat16).enter().unwrap();
    inject_fault("tch_scope_autocast_exit", 1);
    drop(g);
    assert_one(c.take(), "autocast", &injected("tch_scope_autocast_exit"));
    // Restore failed, so autocast is still on in this thread (the test's
    // own, which ends here); the program carries on.
}

#[test]
fn deterministic_restore_failure_reaches_the_hook() {
    let c = capture();
    assert_eq!(deterministic_mode(), None);
    // The inner scope fails to put back `(on, warn_only = false)`; the
    // outer one then turns it off, so the process is clean again.
    scoped!(deterministic => {
        let inner = tch_scope::Deterministic::new().warn_only(true).enter().unwrap();
        inject_fault("tch_scope_deterministic_set", 1);
        drop(inner);
        assert_eq!(deterministic_mode(), Some(true));
    });
    assert_one(
        c.take(),
        "deterministic",
        &injected("tch_scope_deterministic_set"),
    );
    assert_eq!(deterministic_mode(), None);
}

#[test]
fn model_mode_restore_failure_reaches_the_hook() {
    let c = capture();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/bn_dropout.pt");
    let model = CModule::load(path).unwrap();
    Trainable::set_training(&model, true).unwrap();
    let r = try_scoped!(eval(model) => {
        inject_fault("tch_scope_module_leave", 1);
    });
    assert_returned(&c, r, "eval", &injected("tch_scope_module_leave"));
    assert!(Trainable::modes(&model).unwrap().iter().all(|&on| !on));
    Trainable::set_training(&model, true).unwrap();
    let g = Mode::eval(&model).enter().unwrap();
    inject_fault("tch_scope_module_leave", 1);
    drop(g);
    assert_one(c.take(), "eval", &injected("tch_scope_module_leave"));
    // The modes could not be put back: the model stays in eval mode.
    assert!(Trainable::modes(&model).unwrap().iter().all(|&on| !on));
}

/// A mode switch that fails partway (at the third of five modules, after
/// two writes) leaves every module's flag as it was: the scope's entry and
/// a direct `set_training` alike.
#[test]
fn a_mode_switch_that_fails_partway_is_undone() {
    let _c = capture();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/mixed_modes.pt");
    let model = CModule::load(path).unwrap();
    let before = Trainable::modes(&model).unwrap().to_vec();
    assert!(before.len() >= 3 && before.contains(&true) && before.contains(&false));
    for on in [false, true] {
        inject_fault("tch_scope_module_walk", 1);
        let e = (if on {
            Mode::train(&model)
        } else {
            Mode::eval(&model)
        })
        .enter()
        .unwrap_err();
        assert!(
            e.reason()
                .contains("injected fault in tch_scope_module_walk"),
            "{e}"
        );
        assert_eq!(
            Trainable::modes(&model).unwrap().to_vec(),
            before,
            "entry, {on}"
        );
        inject_fault("tch_scope_module_walk", 1);
        assert!(Trainable::set_training(&model, on).is_err());
        assert_eq!(
            Trainable::modes(&model).unwrap().to_vec(),
            before,
            "direct, {on}"
        );
    }
    inject_fault("*", 0);
    // Nothing left behind in the registry: a scope works as usual.
    scoped!(eval(model) => assert!(Trainable::modes(&model).unwrap().iter().all(|&t| !t)));
    assert_eq!(Trainable::modes(&model).unwrap().to_vec(), before);
}

#[test]
fn checkpoint_save_failure_reaches_the_hook() {
    let c = capture();
    let dir = std::env::temp_dir().join(format!("tch-scope-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.ot");
    let vs = VarStore::new(Device::Cpu);
    let _ = nn::linear(vs.root(), 2, 2, Default::default());
    // A real fault: the folder disappears while the scope is open.
    let g = tch_scope::Checkpoint::new(&vs, &path).enter().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    drop(g);
    assert_one(c.take(), "checkpoint", "could not save the checkpoint");
    assert!(!path.exists());
}

#[test]
fn profile_write_failure_reaches_the_hook() {
    let c = capture();
    let dir = std::env::temp_dir().join(format!("tch-scope-faults-prof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    let r = try_scoped!(profile(&path) => {
        let _ = Tensor::ones([4], (Kind::Float, Device::Cpu)) * 2;
        std::fs::remove_dir_all(&dir).unwrap();
    });
    assert_returned(&c, r, "profile", "could not write the profile");
    // The profiler was stopped all the same: a new session can start.
    let path = std::env::temp_dir().join(format!("tch-scope-faults-{}.json", std::process::id()));
    scoped!(profile(&path) => ());
    assert!(path.exists());
    let _ = std::fs::remove_file(&path);
    assert!(c.take().is_empty());
}

// ---- while a panic unwinds ---------------------------------------------------------

#[test]
fn failing_exits_during_unwinding_neither_panic_nor_abort() {
    let c = capture();
    let result = catch_unwind(AssertUnwindSafe(|| {
        scoped!(no_grad, fork_rng, autocast(cpu, bf16) => {
            // The next two fallible shim calls are the two exits.
            inject_fault("*", 2);
            panic!("boom");
        })
    }));
    let payload = result.unwrap_err();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom"));
    // Innermost first; each reported once; the grad guard (which cannot
    // fail) still put grad mode back.
    let seen = c.take();
    let scopes: Vec<_> = seen.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(scopes, ["autocast", "fork_rng"], "{seen:?}");
    assert!(seen[0].1.contains(&injected("tch_scope_autocast_exit")));
    assert!(seen[1].1.contains(&injected("tch_scope_rng_restore")));
    assert!(tch_scope::is_grad_enabled());
}

#[test]
fn a_panicking_hook_is_contained_even_while_unwinding() {
    let c = capture();
    tch_scope::set_exit_hook(|e| panic!("hook panics on {e}"));
    let before = exit_errors_reported();
    let result = catch_unwind(|| {
        scoped!(fork_rng => {
            inject_fault("tch_scope_rng_restore", 1);
            panic!("body");
        })
    });
    assert_eq!(result.unwrap_err().downcast_ref::<&str>(), Some(&"body"));
    // And outside unwinding, in a plain drop.
    let g = tch_scope::ForkRng.enter().unwrap();
    inject_fault("tch_scope_rng_restore", 1);
    drop(g);
    assert_eq!(exit_errors_reported() - before, 2);
    assert!(c.take().is_empty()); // our recording hook was replaced
}

#[test]
fn a_hook_may_drop_a_failing_guard_itself() {
    let c = capture();
    static DEPTH: Mutex<u32> = Mutex::new(0);
    tch_scope::set_exit_hook(|e| {
        let first = {
            let mut d = DEPTH.lock().unwrap();
            *d += 1;
            *d == 1
        };
        if first {
            // Re-enters the reporting path from inside the hook.
            let g = tch_scope::ForkRng.enter().unwrap();
            inject_fault("tch_scope_rng_restore", 1);
            drop(g);
        }
        SEEN.lock().unwrap().push(e.clone());
    });
    let g = tch_scope::ForkRng.enter().unwrap();
    inject_fault("tch_scope_rng_restore", 1);
    drop(g);
    assert_eq!(c.take().len(), 2);
}

// ---- entries that fail -------------------------------------------------------------

#[test]
fn failing_entries_are_scope_errors_and_change_nothing() {
    let c = capture();
    type Enter = fn() -> Result<(), tch_scope::ScopeError>;
    let cases: [(&str, &str, Enter); 4] = [
        (
            "tch_scope_rng_save",
            "fork_rng",
            || try_scoped!(fork_rng => ()),
        ),
        // seed's save succeeds, seeding fails: the saved state goes back.
        ("tch_scope_rng_seed", "seed", || try_scoped!(seed(1) => ())),
        (
            "tch_scope_autocast_enter",
            "autocast",
            || try_scoped!(autocast(cpu, bf16) => ()),
        ),
        (
            "tch_scope_deterministic_set",
            "deterministic",
            || try_scoped!(deterministic => ()),
        ),
    ];
    for (op, word, enter) in cases {
        tch::manual_seed(11);
        let want = rand(4);
        tch::manual_seed(11);
        inject_fault(op, 1);
        let e = enter().unwrap_err();
        assert!(e.scope().starts_with(word), "{e}");
        assert!(e.reason().contains(&injected(op)), "{e}");
        assert_eq!(rand(4), want, "{word} changed the RNG stream");
        assert_eq!(autocast_dtype(tch_scope::AutocastDevice::Cpu), None);
        assert_eq!(deterministic_mode(), None);
    }
    // An entry that fails has no guard, so no exit error either.
    assert!(c.take().is_empty());

    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/bn_dropout.pt");
    let model = CModule::load(path).unwrap();
    Trainable::set_training(&model, true).unwrap();
    inject_fault("tch_scope_module_enter", 1);
    let e = Mode::eval(&model).enter().unwrap_err();
    assert_eq!(e.scope(), "eval");
    assert!(Trainable::modes(&model).unwrap().iter().all(|&on| on));
}
