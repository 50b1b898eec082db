//! What a step boundary holds while the next steps run: the optimizer's
//! parameters and state are aliased, not copied, and the optimizer writes
//! its next update out of place (copy-on-write), so a save of that
//! boundary — at an exit mid-step, or on the background writer — holds its
//! exact values, bitwise; the model's tensors keep their identity; a
//! parameter written in place by the user's own code after a boundary
//! never reaches a file as that boundary's value.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;

use tch::nn::{self, Module, OptimizerConfig, VarStore};
use tch::{Device, Kind, Tensor};
use tch_scope::optim::{Adam, AdamW, Optimizer, Sgd};
use tch_scope::{Checkpoint, Scope, scoped, steps};

fn temp(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "tch-scope-boundaries-{}-{name}.ot",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    path
}

/// Two layers from fixed values (no generator), and a fixed batch.
struct Model {
    vs: VarStore,
    l1: nn::Linear,
    l2: nn::Linear,
    x: Tensor,
    y: Tensor,
}

fn det(n: i64, k: f64, shape: &[i64]) -> Tensor {
    ((Tensor::arange(n, (Kind::Double, Device::Cpu)) * 0.37 + k).sin() * 0.5)
        .to_kind(Kind::Float)
        .reshape(shape)
}

fn model() -> Model {
    let vs = VarStore::new(Device::Cpu);
    let l1 = nn::linear(vs.root() / "l1", 4, 8, Default::default());
    let l2 = nn::linear(vs.root() / "l2", 8, 2, Default::default());
    tch::no_grad(|| {
        for (name, mut t) in vs.variables() {
            let n = t.numel() as i64;
            let k = name.len() as f64;
            t.copy_(&det(n, k, &t.size()));
        }
    });
    let x = det(64, 0.3, &[16, 4]);
    let y = det(32, 0.7, &[16, 2]);
    Model { vs, l1, l2, x, y }
}

fn loss(m: &Model) -> Tensor {
    let h = m.l1.forward(&m.x).tanh();
    (m.l2.forward(&h) - &m.y).square().mean(Kind::Float)
}

/// Tensors by name.
type Named = Vec<(String, Tensor)>;

/// The VarStore's variables by name, deep copies.
fn weights(vs: &VarStore) -> Named {
    let mut named: Vec<_> = vs
        .variables()
        .into_iter()
        .map(|(n, t)| (n, t.detach().copy()))
        .collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named
}

fn same(a: &[(String, Tensor)], b: &[(String, Tensor)], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for ((na, ta), (nb, tb)) in a.iter().zip(b) {
        assert_eq!(na, nb, "{what}");
        assert!(ta.equal(tb), "{what}: `{na}` differs");
    }
}

/// The weights and the optimizer's state a file holds, loaded into a
/// fresh model and optimizer made by `make`.
fn loaded<O: Optimizer>(path: &PathBuf, make: &dyn Fn(&VarStore) -> O) -> (Named, Named) {
    let back = model();
    let opt = make(&back.vs);
    drop(
        Checkpoint::new(&back.vs, path)
            .resume(true)
            .optimizer(&opt)
            .enter()
            .unwrap(),
    );
    (weights(&back.vs), opt.state())
}

/// For one optimizer: a run that panics in step 6 after its update saves
/// the state of step 6's boundary bitwise, though the update since was
/// written out of place into the storages that boundary does not hold;
/// the model's tensors stayed the VarStore's, and the updates inside the
/// checkpoint equal the in-place updates of a run with none, bitwise.
fn boundary_survives_the_next_update<O: Optimizer>(name: &str, make: &dyn Fn(&VarStore) -> O) {
    // The reference: no checkpoint, every update in place.
    let plain = model();
    let opt = make(&plain.vs);
    let mut at = vec![];
    for step in 0..7 {
        if step == 6 {
            at = weights(&plain.vs);
        }
        opt.backward_step(&loss(&plain)).unwrap();
    }
    let state_at_6 = {
        // The state after 6 steps, from a second reference run.
        let r = model();
        let o = make(&r.vs);
        for _ in 0..6 {
            o.backward_step(&loss(&r)).unwrap();
        }
        o.state()
    };
    let after_7 = weights(&plain.vs);

    let path = temp(name);
    let m = model();
    let opt = make(&m.vs);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        scoped!(checkpoint(m.vs, &path, optimizer = opt, every = 4) => {
            for step in steps(10) {
                opt.backward_step(&loss(&m)).unwrap();
                if step == 6 {
                    panic!("after the update of step 6");
                }
            }
        });
    }));
    assert!(unwound.is_err());
    // The live model took step 6's update (into other storages), bitwise
    // the in-place one, and the layers still use the VarStore's tensors.
    same(&weights(&m.vs), &after_7, &format!("{name}: live weights"));
    let ws = m.vs.variables()["l1.weight"].shallow_clone();
    assert_eq!(m.l1.ws.data_ptr(), ws.data_ptr(), "{name}: one tensor");
    let (saved, saved_state) = loaded(&path, make);
    assert_eq!(Checkpoint::read(&path).unwrap().step, 6, "{name}");
    same(&saved, &at, &format!("{name}: saved weights"));
    same(&saved_state, &state_at_6, &format!("{name}: saved state"));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_boundary_keeps_its_values_bitwise_while_the_optimizer_updates_out_of_place() {
    boundary_survives_the_next_update("adam", &|vs| Adam::new(vs, 0.01).unwrap().weight_decay(0.1));
    boundary_survives_the_next_update("adam-amsgrad", &|vs| {
        Adam::new(vs, 0.02).unwrap().amsgrad(true)
    });
    boundary_survives_the_next_update("adamw", &|vs| AdamW::new(vs, 0.01).unwrap());
    boundary_survives_the_next_update("sgd-nesterov", &|vs| {
        Sgd::new(vs, 0.05)
            .unwrap()
            .momentum(0.9)
            .nesterov(true)
            .weight_decay(0.01)
    });
}

/// Triple buffering: over many boundaries and background saves each
/// parameter uses at most three storages (the live one, the last
/// boundary's, the one a write reads), so no step allocates; outside a
/// checkpoint the optimizer writes in place again.
#[test]
fn each_parameter_cycles_through_at_most_three_storages() {
    let path = temp("storages");
    let m = model();
    let opt = Adam::new(&m.vs, 0.01).unwrap();
    let mut seen: BTreeSet<usize> = BTreeSet::new();
    scoped!(checkpoint(m.vs, &path, optimizer = opt, every = 3) => {
        for _ in steps(40) {
            opt.backward_step(&loss(&m)).unwrap();
            seen.insert(m.l1.ws.data_ptr() as usize);
        }
    });
    assert!(
        (2..=3).contains(&seen.len()),
        "{} storages: {seen:?}",
        seen.len()
    );
    let before = m.l1.ws.data_ptr();
    for _ in 0..3 {
        opt.backward_step(&loss(&m)).unwrap();
    }
    assert_eq!(m.l1.ws.data_ptr(), before, "in place outside a checkpoint");
    assert_eq!(Checkpoint::read(&path).unwrap().step, 40);
    std::fs::remove_file(&path).unwrap();
}

/// Variables no optimizer owns — a counter a step bumps in place (as
/// BatchNorm's running statistics), a frozen table never written — are
/// copied at a boundary when they changed: an exit mid-step saves the
/// boundary's values, not the half step's.
#[test]
fn variables_the_optimizer_does_not_own_are_saved_as_the_boundary_had_them() {
    let path = temp("others");
    let m = model();
    let counter = m.vs.root().zeros_no_train("counter", &[1]);
    let table = m.vs.root().var_copy("table", &det(12, 0.1, &[3, 4]));
    let _ = table.set_requires_grad(false);
    let opt = Adam::new(&m.vs, 0.01).unwrap();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        scoped!(checkpoint(m.vs, &path, optimizer = opt) => {
            for step in steps(10) {
                tch::no_grad(|| {
                    let mut c = counter.shallow_clone();
                    c += 1.0;
                });
                opt.backward_step(&loss(&m)).unwrap();
                if step == 5 {
                    panic!("after the counter of step 5");
                }
            }
        });
    }));
    assert!(unwound.is_err());
    assert_eq!(counter.double_value(&[0]), 6.0, "the live counter");
    let back = model();
    let counter_back = back.vs.root().zeros_no_train("counter", &[1]);
    let table_back = back.vs.root().zeros_no_train("table", &[3, 4]);
    let opt_back = Adam::new(&back.vs, 0.01).unwrap();
    drop(
        Checkpoint::new(&back.vs, &path)
            .resume(true)
            .optimizer(&opt_back)
            .enter()
            .unwrap(),
    );
    assert_eq!(counter_back.double_value(&[0]), 5.0, "the boundary's");
    assert!(table_back.equal(&table));
    std::fs::remove_file(&path).unwrap();
}

static HEARD: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The user's own code writes a parameter in place after a boundary,
/// before the optimizer's update (`no_grad` `p.copy_(…)`): the storage
/// that boundary aliased now holds other values. A save of that boundary
/// is refused (the previous file stays, the exit hook hears which
/// parameter), never written with the overwritten values; from then on
/// the checkpoint copies that parameter at each boundary, so later
/// boundaries save exactly.
#[test]
fn a_parameter_written_in_place_by_the_user_never_reaches_a_file_as_the_boundary() {
    tch_scope::set_exit_hook(|e| HEARD.lock().unwrap().push(e.to_string()));
    let path = temp("user-writes");
    let m = model();
    let opt = Adam::new(&m.vs, 0.01).unwrap();
    let mut ws = m.l2.ws.shallow_clone();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        scoped!(checkpoint(m.vs, &path, optimizer = opt, every = 5) => {
            for step in steps(10) {
                if step == 6 {
                    tch::no_grad(|| ws.copy_(&Tensor::full_like(&ws, 7.0)));
                    panic!("after writing l2.weight in place in step 6");
                }
                opt.backward_step(&loss(&m)).unwrap();
            }
        });
    }));
    assert!(unwound.is_err());
    let heard = HEARD.lock().unwrap().clone();
    assert!(
        heard
            .iter()
            .any(|e| e.contains("`l2.weight` was written in place after the boundary of step 6")),
        "{heard:?}"
    );
    assert_eq!(
        Checkpoint::read(&path).unwrap().step,
        5,
        "the periodic save of step 5 stays"
    );

    // Written in place at every step from now on: after the first time,
    // the parameter is copied at each boundary, and the exit saves the
    // boundary exactly.
    let path = temp("user-writes-again");
    let mut at = vec![];
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        scoped!(checkpoint(m.vs, &path, optimizer = opt) => {
            for step in steps(10) {
                if step == 4 {
                    at = weights(&m.vs);
                }
                tch::no_grad(|| {
                    let clipped = ws.clamp(-0.2, 0.2);
                    ws.copy_(&clipped);
                });
                opt.backward_step(&loss(&m)).unwrap();
                if step == 4 {
                    panic!("after step 4's update");
                }
            }
        });
    }));
    assert!(unwound.is_err());
    let (saved, _) = loaded(&path, &|vs| Adam::new(vs, 0.01).unwrap());
    same(&saved, &at, "the boundary of step 4");
    tch_scope::reset_exit_hook();
    std::fs::remove_file(&path).unwrap();
}

/// tch's own optimizer can't be named by a checkpoint; a model trained by
/// it inside a `steps` loop is copied at each boundary (no aliasing), and
/// an exit still saves the boundary.
#[test]
fn weights_an_unnamed_optimizer_updates_are_copied_at_each_boundary() {
    let path = temp("tch-optimizer");
    let m = model();
    let mut sgd = nn::Sgd::default().build(&m.vs, 0.1).unwrap();
    let mut at = vec![];
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        scoped!(checkpoint(m.vs, &path) => {
            for step in steps(10) {
                if step == 3 {
                    at = weights(&m.vs);
                }
                sgd.backward_step(&loss(&m));
                if step == 3 {
                    panic!("after step 3's update");
                }
            }
        });
    }));
    assert!(unwound.is_err());
    let mut back = model();
    back.vs.load(&path).unwrap();
    same(&weights(&back.vs), &at, "the boundary of step 3");
    std::fs::remove_file(&path).unwrap();
}

/// A graph built before an update that saved a parameter is refused its
/// backward after the update, as after PyTorch's in-place update: the
/// out-of-place update bumps the parameter's version counter as an
/// in-place one does, so autograd never differentiates through the
/// boundary's old values with the new ones silently.
#[test]
fn a_graph_kept_across_an_out_of_place_update_is_refused_as_after_an_in_place_one() {
    fn second_backward(inside: bool) -> Result<(), tch::TchError> {
        let path = temp(if inside {
            "kept-graph-in"
        } else {
            "kept-graph-out"
        });
        let m = model();
        let opt = Adam::new(&m.vs, 0.01).unwrap();
        let run = || -> Result<(), tch::TchError> {
            let kept = loss(&m);
            opt.backward_step(&loss(&m)).unwrap();
            Tensor::f_run_backward(&[&kept], &[&m.l1.ws], false, false).map(|_| ())
        };
        let result = if inside {
            scoped!(checkpoint(m.vs, &path, optimizer = opt) => {
                let mut result = Ok(());
                for step in steps(3) {
                    if step == 1 {
                        result = run();
                    } else {
                        opt.backward_step(&loss(&m)).unwrap();
                    }
                }
                result
            })
        } else {
            run()
        };
        let _ = std::fs::remove_file(&path);
        result
    }
    let outside = second_backward(false).expect_err("in place: refused");
    assert!(
        outside
            .to_string()
            .contains("modified by an inplace operation"),
        "{outside}"
    );
    let inside = second_backward(true).expect_err("out of place: refused too");
    assert!(
        inside
            .to_string()
            .contains("modified by an inplace operation"),
        "{inside}"
    );
}
