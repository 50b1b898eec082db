//! Runs stopped by SIGKILL, a panic or an `Err` at chosen steps, each
//! restarted with `resume`, against the run never stopped: the final
//! weights must be bitwise equal.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use tch_scope::Checkpoint;

use super::child::{EVERY, STEPS, same_weights, spawn};

fn temp(name: &str) -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("tch-scope-resume-{}-{name}.ot", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// Trains to the end in one process.
fn uninterrupted(name: &str) -> PathBuf {
    let path = temp(name);
    let (status, _) = spawn(&format!("{} none -1 opt", path.display()));
    assert!(status.success(), "{status:?}");
    assert_eq!(Checkpoint::read(&path).unwrap().step, STEPS);
    path
}

/// Runs the child with `fault` at `at`, expecting it to die that way.
fn stopped(path: &Path, fault: &str, at: i64, optimizer: &str) {
    let (status, at_boundary) = spawn(&format!("{} {fault} {at} {optimizer}", path.display()));
    match fault {
        "kill" | "kill-start" => assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}"),
        // Ended by the signal itself after the save: a shell reads 130/143.
        "sigint" | "sigterm" => {
            let signal = if fault == "sigint" {
                libc::SIGINT
            } else {
                libc::SIGTERM
            };
            assert_eq!(status.signal(), Some(signal), "{status:?}");
            // The step in progress ran whole: the loop, not a refused
            // operator, ended the body.
            assert!(
                at_boundary,
                "{fault}: the loop did not end at a step boundary"
            );
        }
        _ => assert!(!status.success(), "{status:?}"),
    }
}

fn finish(path: &Path, optimizer: &str) {
    let (status, at_boundary) = spawn(&format!("{} none -1 {optimizer}", path.display()));
    assert!(at_boundary);
    assert!(status.success(), "{status:?}");
    assert_eq!(Checkpoint::read(path).unwrap().step, STEPS);
}

#[test]
fn a_run_killed_three_times_ends_with_the_weights_of_one_never_stopped() {
    let w = uninterrupted("w-kill");
    let path = temp("killed");
    // In the middle of a step; as a step begins right after the save at
    // its boundary was handed to the background writer (perhaps still
    // writing when the process dies); in a step just after a save.
    for (fault, at) in [("kill", 13), ("kill-start", 25), ("kill", 41)] {
        stopped(&path, fault, at, "opt");
        let saved = Checkpoint::read(&path).unwrap();
        // A SIGKILL loses at most the steps since the last save that
        // finished: the save at the last multiple of 5, or (a write cut
        // short) the one before it.
        let last = at / EVERY * EVERY;
        assert!(
            saved.step == last || saved.step == last - EVERY,
            "killed in step {at}, resumes at {}",
            saved.step
        );
        assert_eq!(
            saved.metrics.get("loss").len(),
            usize::try_from(saved.step).unwrap()
        );
    }
    finish(&path, "opt");
    assert!(same_weights(&w, &path), "the resumed run's weights differ");
    let (a, b) = (
        Checkpoint::read(&w).unwrap(),
        Checkpoint::read(&path).unwrap(),
    );
    assert_eq!(a.metrics, b.metrics, "the same losses, step for step");
    for p in [w, path] {
        std::fs::remove_file(p).unwrap();
    }
}

#[test]
fn a_run_stopped_by_a_panic_or_an_err_mid_step_resumes_bitwise() {
    let w = uninterrupted("w-panic");
    let path = temp("panicked");
    // The panic comes after the optimizer's update of step 33: the exit
    // saves step 33's boundary, not the half-done step.
    stopped(&path, "panic", 33, "opt");
    assert_eq!(Checkpoint::read(&path).unwrap().step, 33);
    stopped(&path, "err", 47, "opt");
    assert_eq!(Checkpoint::read(&path).unwrap().step, 47);
    finish(&path, "opt");
    assert!(same_weights(&w, &path), "the resumed run's weights differ");
    for p in [w, path] {
        std::fs::remove_file(p).unwrap();
    }
}

/// The checkpoint without the optimizer (as before it could hold one):
/// Adam restarts cold after the kill, and the run ends elsewhere. What the
/// test above guards against.
#[test]
fn without_the_optimizer_state_a_resumed_run_ends_elsewhere() {
    let w = uninterrupted("w-cold");
    let path = temp("cold");
    stopped(&path, "kill", 13, "no");
    assert!(Checkpoint::read(&path).unwrap().optimizer.is_empty());
    finish(&path, "no");
    assert!(!same_weights(&w, &path), "a cold Adam took the same steps");
    for p in [w, path] {
        std::fs::remove_file(p).unwrap();
    }
}

#[test]
fn sigint_and_sigterm_end_the_run_at_a_step_boundary_and_lose_no_step() {
    let w = uninterrupted("w-signal");
    let path = temp("signalled");
    // Each signal arrives in the middle of a step: the step runs whole, the
    // loop ends at its boundary, the checkpoint saves it, and the process
    // ends as the signal would have ended it.
    for (fault, at) in [("sigint", 17), ("sigterm", 38)] {
        stopped(&path, fault, at, "opt");
        // The signal is handled on whichever thread the kernel picks, so
        // the loop may see it a boundary or two later; whichever boundary
        // ended it is what the file holds, with the metrics of exactly the
        // steps completed.
        let saved = Checkpoint::read(&path).unwrap();
        assert!(
            saved.step > at,
            "{fault} in step {at}: saved at {}",
            saved.step
        );
        assert_eq!(
            saved.metrics.get("loss").len(),
            usize::try_from(saved.step).unwrap()
        );
    }
    finish(&path, "opt");
    assert!(same_weights(&w, &path), "the resumed run's weights differ");
    for p in [w, path] {
        std::fs::remove_file(p).unwrap();
    }
}
