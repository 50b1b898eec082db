//! The step loop and the checkpoint's training state in one process:
//! where `steps` starts, what an exit saves, `Checkpoint::read`, and the
//! refusals. Nothing here depends on the generators' draws.

use std::path::PathBuf;

use tch::nn::{self, Module, VarStore};
use tch::{Device, Kind, Tensor};
use tch_scope::optim::{Adam, Optimizer};
use tch_scope::{Checkpoint, RunState, Scope, log_metric, scoped, steps};

fn temp(name: &str) -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("tch-scope-steps-{}-{name}.ot", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

struct Model {
    vs: VarStore,
    lin: nn::Linear,
    opt: Adam,
}

fn model() -> Model {
    let vs = VarStore::new(Device::Cpu);
    let lin = nn::linear(vs.root() / "lin", 3, 2, Default::default());
    let opt = Adam::new(&vs, 1e-2).unwrap();
    Model { vs, lin, opt }
}

fn train_step(m: &Model) {
    let x = Tensor::ones([4, 3], (Kind::Float, Device::Cpu));
    let loss = m.lin.forward(&x).square().mean(Kind::Float);
    m.opt.backward_step(&loss).unwrap();
    log_metric("loss", loss.double_value(&[]));
}

fn weights(vs: &VarStore) -> Vec<Tensor> {
    let mut named = vs.variables().into_iter().collect::<Vec<_>>();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named.into_iter().map(|(_, t)| t.detach().copy()).collect()
}

#[test]
fn without_a_checkpoint_steps_just_counts() {
    assert_eq!(steps(3).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(steps(0).count(), 0);
    assert_eq!(steps(-2).count(), 0);
}

#[test]
fn steps_go_on_from_the_step_a_resumed_checkpoint_holds() {
    let path = temp("from");
    let m = model();
    let first = scoped!(checkpoint(m.vs, &path, resume, optimizer = m.opt) => {
        steps(5).inspect(|_| train_step(&m)).collect::<Vec<_>>()
    });
    assert_eq!(first, [0, 1, 2, 3, 4]);
    let saved = Checkpoint::read(&path).unwrap();
    assert_eq!(saved.step, 5);
    assert_eq!(saved.metrics.get("loss").len(), 5);
    assert!(
        saved
            .optimizer
            .iter()
            .any(|n| n.starts_with("Adam.exp_avg.")),
        "{:?}",
        saved.optimizer
    );

    let again = model();
    let rest = scoped!(checkpoint(again.vs, &path, resume, optimizer = again.opt) => {
        assert_eq!(again.opt.steps_taken(), 5, "Adam's state came back");
        steps(8).inspect(|_| train_step(&again)).collect::<Vec<_>>()
    });
    assert_eq!(rest, [5, 6, 7]);
    assert_eq!(Checkpoint::read(&path).unwrap().step, 8);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_panic_mid_step_saves_the_state_of_the_last_step_boundary() {
    let path = temp("panic");
    let m = model();
    let mut at_boundary = vec![];
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        scoped!(checkpoint(m.vs, &path, optimizer = m.opt, every = 2) => {
            for step in steps(10) {
                if step == 3 {
                    at_boundary = weights(&m.vs);
                }
                train_step(&m);
                if step == 3 {
                    panic!("after the update of step 3");
                }
            }
        });
    }));
    assert!(unwound.is_err());
    let saved = Checkpoint::read(&path).unwrap();
    assert_eq!(saved.step, 3, "the last completed step boundary");
    assert_eq!(
        saved.metrics.get("loss").len(),
        3,
        "no metric of the half step"
    );
    let back = model();
    drop(
        Checkpoint::new(&back.vs, &path)
            .resume(true)
            .optimizer(&back.opt)
            .enter()
            .unwrap(),
    );
    assert_eq!(back.opt.steps_taken(), 3);
    for (got, want) in weights(&back.vs).iter().zip(&at_boundary) {
        assert!(
            got.equal(want),
            "the weights of step 3's boundary, not the half step's"
        );
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_loop_left_by_break_saves_its_last_boundary_and_one_run_to_the_end_the_live_state() {
    let path = temp("break");
    let m = model();
    scoped!(checkpoint(m.vs, &path, optimizer = m.opt) => {
        for step in steps(10) {
            train_step(&m);
            if step == 4 {
                break; // step 4 never completed
            }
        }
    });
    assert_eq!(Checkpoint::read(&path).unwrap().step, 4);
    scoped!(checkpoint(m.vs, &path, optimizer = m.opt) => {
        for _ in steps(2) {
            train_step(&m);
        }
        log_metric("final", 1.0); // after the loop: saved with the live state
    });
    let saved = Checkpoint::read(&path).unwrap();
    assert_eq!((saved.step, saved.metrics.get("final")), (2, &[1.0][..]));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn periodic_saves_reach_the_file_while_the_loop_goes_on() {
    let path = temp("every");
    let m = model();
    scoped!(checkpoint(m.vs, &path, optimizer = m.opt, every = 2) => {
        for step in steps(7) {
            if step == 5 {
                // The save of step 2 ended before the one of step 4 began
                // (one write at a time); that one may still be writing.
                let saved = Checkpoint::read(&path).unwrap();
                assert!(saved.step == 2 || saved.step == 4, "{}", saved.step);
            }
            train_step(&m);
        }
    });
    assert_eq!(Checkpoint::read(&path).unwrap().step, 7);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn the_run_state_is_saved_at_each_boundary_and_restored_on_resume() {
    let path = temp("state");
    let m = model();
    let epochs = RunState::new((0u32, String::from("fresh")));
    scoped!(checkpoint(m.vs, &path, state = epochs) => {
        for step in steps(3) {
            epochs.set((u32::try_from(step).unwrap() + 1, format!("after {step}")));
        }
    });
    let saved = Checkpoint::read(&path).unwrap();
    assert_eq!(
        saved.state::<(u32, String)>().unwrap(),
        Some((3, "after 2".into()))
    );
    assert!(
        saved
            .state::<Vec<f64>>()
            .unwrap_err()
            .to_string()
            .contains("is not a")
    );
    let back = RunState::new((0u32, String::new()));
    scoped!(checkpoint(m.vs, &path, resume, state = back) => {
        assert_eq!(back.get(), (3, "after 2".into()));
    });
    let wrong = RunState::new(vec![0.5f64]);
    let e = Checkpoint::new(&m.vs, &path)
        .resume(true)
        .state(&wrong)
        .enter()
        .unwrap_err();
    assert!(
        e.to_string().contains("does not fit this run's type"),
        "{e}"
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn read_writes_nothing() {
    let path = temp("read");
    let m = model();
    scoped!(checkpoint(m.vs, &path) => { for _ in steps(2) { train_step(&m); } });
    let before = std::fs::read(&path).unwrap();
    let saved = Checkpoint::read(&path).unwrap();
    assert_eq!((saved.step, saved.state_json.as_deref()), (2, None));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let e = Checkpoint::read(temp("missing")).unwrap_err();
    assert!(e.to_string().contains("checkpoint("), "{e}");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn bad_settings_and_files_are_refused_on_entry() {
    let path = temp("refused");
    let m = model();
    for k in [0, -3] {
        let e = Checkpoint::new(&m.vs, &path).every(k).enter().unwrap_err();
        assert!(
            e.to_string().contains("`every` must be at least 1 step"),
            "{e}"
        );
    }
    // Saved without the optimizer, resumed with it: Adam would start cold.
    scoped!(checkpoint(m.vs, &path) => {});
    let e = Checkpoint::new(&m.vs, &path)
        .resume(true)
        .optimizer(&m.opt)
        .enter()
        .unwrap_err();
    assert!(e.to_string().contains("no optimizer state"), "{e}");
    assert_eq!(Optimizer::name(&m.opt), "Adam");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_safetensors_checkpoint_holds_the_training_state_too() {
    let path = temp("st").with_extension("safetensors");
    let _ = std::fs::remove_file(&path);
    let m = model();
    let state = RunState::new(vec![1u8, 2, 3]);
    scoped!(checkpoint(m.vs, &path, optimizer = m.opt, state = state) => {
        for _ in steps(3) {
            train_step(&m);
        }
    });
    let back = model();
    let s = RunState::new(Vec::<u8>::new());
    let rest = scoped!(checkpoint(back.vs, &path, resume, optimizer = back.opt, state = s) => {
        steps(4).collect::<Vec<_>>()
    });
    assert_eq!(rest, [3]);
    assert_eq!(back.opt.steps_taken(), 3);
    assert_eq!(s.get(), [1, 2, 3]);
    assert_eq!(Checkpoint::read(&path).unwrap().step, 4);
    std::fs::remove_file(&path).unwrap();
}

/// `#[checkpoint(..)]` on a function whose parameters are references: the
/// optimizer and the run state are named through them.
#[tch_scope::checkpoint(vs, path, resume, optimizer = opt, every = 2, state = seen)]
fn train_fn(
    vs: &VarStore,
    path: &std::path::Path,
    m: &Model,
    opt: &Adam,
    seen: &RunState<u32>,
) -> i64 {
    let _ = vs;
    let mut last = -1;
    for step in steps(5) {
        let x = Tensor::ones([4, 3], (Kind::Float, Device::Cpu));
        let loss = m.lin.forward(&x).square().mean(Kind::Float);
        opt.backward_step(&loss).unwrap();
        seen.update(|n| *n += 1);
        last = step;
    }
    last
}

#[test]
fn the_attribute_takes_the_optimizer_and_the_state_by_reference() {
    let path = temp("attr");
    let m = model();
    let seen = RunState::new(0u32);
    assert_eq!(train_fn(&m.vs, &path, &m, &m.opt, &seen), 4);
    let saved = Checkpoint::read(&path).unwrap();
    assert_eq!((saved.step, saved.state::<u32>().unwrap()), (5, Some(5)));
    assert!(!saved.optimizer.is_empty());
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn steps_belong_to_the_innermost_checkpoint_and_count_on_across_loops() {
    let (outer_path, inner_path) = (temp("outer"), temp("inner"));
    let m = model();
    let (first, second) = scoped!(checkpoint(m.vs, &outer_path) => {
        let inner = scoped!(checkpoint(m.vs, &inner_path) => {
            let first: Vec<i64> = steps(3).collect();
            // One counter per checkpoint: the next loop goes on from 3.
            let second: Vec<i64> = steps(5).collect();
            (first, second)
        });
        assert_eq!(Checkpoint::read(&inner_path).unwrap().step, 5);
        inner
    });
    assert_eq!((first, second), (vec![0, 1, 2], vec![3, 4]));
    // The outer checkpoint ran no loop of its own.
    assert_eq!(Checkpoint::read(&outer_path).unwrap().step, 0);
    // A loop made inside a checkpoint and run after it ended just counts.
    let later = scoped!(checkpoint(m.vs, &inner_path) => steps(2));
    assert_eq!(later.collect::<Vec<_>>(), [0, 1]);
    for p in [outer_path, inner_path] {
        std::fs::remove_file(p).unwrap();
    }
}

#[test]
fn state_into_rewrites_an_earlier_state_in_place_and_equals_state() {
    let m = model();
    for _ in 0..2 {
        train_step(&m);
    }
    let mut buffers = m.opt.state();
    let before: Vec<usize> = buffers.iter().map(|(_, t)| t.data_ptr() as usize).collect();
    train_step(&m);
    m.opt.state_into(&mut buffers);
    let fresh = m.opt.state();
    assert_eq!(buffers.len(), fresh.len());
    for ((n, t), (m_, f)) in buffers.iter().zip(&fresh) {
        assert_eq!(n, m_);
        assert!(t.equal(f), "{n}");
    }
    let after: Vec<usize> = buffers.iter().map(|(_, t)| t.data_ptr() as usize).collect();
    assert_eq!(before, after, "the same tensors, rewritten");
    // Into a state of another shape (here: none), it is made anew.
    let mut empty = vec![];
    m.opt.state_into(&mut empty);
    assert_eq!(empty.len(), fresh.len());
}

#[test]
fn a_resume_that_fails_changes_nothing() {
    let path = temp("partial");
    let m = model();
    let state = RunState::new(7u32);
    scoped!(checkpoint(m.vs, &path, optimizer = m.opt, state = state) => {
        for _ in steps(2) {
            train_step(&m);
        }
    });
    // A run state of another type: refused before the optimizer is loaded.
    let back = model();
    let wrong = RunState::new(String::from("kept"));
    let e = Checkpoint::new(&back.vs, &path)
        .resume(true)
        .optimizer(&back.opt)
        .state(&wrong)
        .enter()
        .unwrap_err();
    assert!(e.to_string().contains("does not fit"), "{e}");
    assert_eq!(
        back.opt.steps_taken(),
        0,
        "the optimizer was left as it was"
    );
    assert_eq!(wrong.get(), "kept");
    // The generator of a CUDA device this machine may not have.
    let mut named = Tensor::load_multi(&path).unwrap();
    let cpu = named
        .iter()
        .find(|(n, _)| n == "__tch_scope_rng__.cpu")
        .unwrap()
        .1
        .copy();
    let missing = tch_scope::cuda_device_count();
    named.push((format!("__tch_scope_rng__.cuda:{missing}"), cpu));
    let refs: Vec<(&str, &Tensor)> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
    Tensor::save_multi(&refs, &path).unwrap();
    let right = RunState::new(0u32);
    let e = Checkpoint::new(&back.vs, &path)
        .resume(true)
        .optimizer(&back.opt)
        .state(&right)
        .enter()
        .unwrap_err();
    assert!(
        e.to_string().contains(&format!("CUDA device {missing}")),
        "{e}"
    );
    assert_eq!(
        (back.opt.steps_taken(), right.get()),
        (0, 0),
        "nothing was loaded"
    );
    std::fs::remove_file(&path).unwrap();
}
