//! A checkpoint whose folder can't be fsynced after its rename: the save
//! is done (the new file is in place and complete), not failed; the exit
//! hook hears that its durability is not confirmed. The folder's fsync is
//! made to fail with the test-only fault switch
//! (`__private::inject_fault("durable::sync_dir", n)`), in a child
//! process (the exit hook is process-wide).

use tch_scope::__private::inject_fault;
use tch_scope::{log_metric, scoped, try_scoped};

use crate::{child_passes, fill, heard, in_child, left_over, record_exit_errors};
use crate::{saved, saved_metrics, scratch, small_vs};

/// The notice the hook must hear for `path`, once per save.
#[track_caller]
fn assert_unsynced_notice(heard: &[String], path: &std::path::Path) {
    assert_eq!(heard.len(), 1, "{heard:?}");
    let h = &heard[0];
    let start = format!(
        "could not leave `checkpoint` cleanly: saved {} in full, but could not fsync its folder ",
        path.display()
    );
    assert!(h.starts_with(&start), "{h}");
    assert!(h.contains(": injected fault in durable::sync_dir: "), "{h}");
    assert!(h.contains("the save is not confirmed durable"), "{h}");
}

/// The child of `a_checkpoint_whose_folder_cannot_be_fsynced_is_saved`.
#[test]
fn checkpoint_with_a_failing_folder_fsync() {
    if !in_child() {
        return;
    }
    record_exit_errors();
    let dir = scratch("unsynced");
    let path = dir.join("model.ot");
    let vs = small_vs();
    fill(&vs, 1.0);
    scoped!(checkpoint(vs, &path) => ());
    assert_eq!(heard(), [] as [String; 0]);

    // `try_scoped!`: `Ok`, the new file in place, a notice to the hook.
    inject_fault("durable::sync_dir", 1);
    let r = try_scoped!(checkpoint(vs, &path) => {
        fill(&vs, 2.0);
        log_metric("loss", 0.5);
    });
    assert!(r.is_ok(), "saved, so not an error: {r:?}");
    assert_unsynced_notice(&heard(), &path);
    assert_eq!(saved(&path), 2.0, "the new weights are in place");
    assert_eq!(
        saved_metrics(&path).get("loss"),
        [0.5],
        "and the new metrics"
    );
    assert_eq!(left_over(&dir, &["model.ot"]), [] as [String; 0]);

    // `scoped!` does not panic; an attributed `Result` fn returns `Ok`.
    inject_fault("durable::sync_dir", 1);
    scoped!(checkpoint(vs, &path) => fill(&vs, 3.0));
    assert_unsynced_notice(&heard(), &path);
    assert_eq!(saved(&path), 3.0);

    #[tch_scope::checkpoint(vs, path)]
    fn step(vs: &tch::nn::VarStore, path: &std::path::Path) -> Result<(), tch_scope::ScopeError> {
        fill(vs, 4.0);
        Ok(())
    }
    inject_fault("durable::sync_dir", 1);
    assert_eq!(step(&vs, &path), Ok(()));
    assert_unsynced_notice(&heard(), &path);
    assert_eq!(saved(&path), 4.0);
    assert_eq!(left_over(&dir, &["model.ot"]), [] as [String; 0]);
    std::fs::remove_dir_all(&dir).unwrap();
    println!("failing folder fsync: done");
}

/// A save whose rename succeeded and whose folder's fsync then failed is
/// reported as saved, with its durability not confirmed: never as a
/// failed save.
#[test]
fn a_checkpoint_whose_folder_cannot_be_fsynced_is_saved() {
    if in_child() {
        return;
    }
    child_passes(
        "checkpoint_durability::checkpoint_with_a_failing_folder_fsync",
        "failing folder fsync: done",
    );
}
