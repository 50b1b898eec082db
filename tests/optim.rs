//! `tch_scope::optim` against PyTorch's own optimizers (the bootstrap's
//! `torch.optim`, the oracle): 20 steps of a small MLP from the same
//! weights and data, every parameter within 1e-6; and the state saved,
//! loaded into a fresh optimizer and stepped on, bitwise the run that
//! never stopped.

use std::collections::BTreeMap;

use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};
use tch_scope::optim::{Adam, AdamW, Optimizer, Sgd};

use crate::oracle::python;

const STEPS: usize = 20;

/// The same deterministic values on both sides: computed in f64 by the
/// same libtorch, then cast.
const PY_SETUP: &str = r#"
import json, torch
def det(n, k, shape):
    return ((torch.arange(n, dtype=torch.float64) * 0.37 + k).sin() * 0.5).float().reshape(shape)
def fresh():
    return {
        "l1.weight": det(32, 1.0, (8, 4)).requires_grad_(),
        "l1.bias": det(8, 2.0, (8,)).requires_grad_(),
        "l2.weight": det(16, 3.0, (2, 8)).requires_grad_(),
        "l2.bias": det(2, 4.0, (2,)).requires_grad_(),
    }
x = (torch.arange(64, dtype=torch.float64) * 0.11).cos().float().reshape(16, 4)
t = (torch.arange(32, dtype=torch.float64) * 0.23).sin().float().reshape(16, 2)
def loss(p):
    h = torch.tanh(x.matmul(p["l1.weight"].t()) + p["l1.bias"])
    y = h.matmul(p["l2.weight"].t()) + p["l2.bias"]
    return (y - t).square().mean()
def run(make):
    p = fresh()
    opt = make(list(p.values()))
    for _ in range(20):
        opt.zero_grad()
        loss(p).backward()
        opt.step()
    return {k: v.detach().flatten().tolist() for k, v in p.items()}
O = torch.optim
out = {
    "adam_wd": run(lambda ps: O.Adam(ps, lr=0.01, weight_decay=0.1)),
    "adam_amsgrad": run(lambda ps: O.Adam(ps, lr=0.02, betas=(0.8, 0.99), eps=1e-6, amsgrad=True)),
    "adamw": run(lambda ps: O.AdamW(ps, lr=0.01, weight_decay=0.1)),
    "sgd_momentum": run(lambda ps: O.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    "sgd_nesterov": run(lambda ps: O.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "sgd": run(lambda ps: O.SGD(ps, lr=0.1)),
}
print(json.dumps(out))
"#;

fn det(n: i64, k: f64, shape: &[i64]) -> Tensor {
    ((Tensor::arange(n, (Kind::Double, Device::Cpu)) * 0.37 + k).sin() * 0.5)
        .to_kind(Kind::Float)
        .reshape(shape)
}

/// The MLP's four parameters in a fresh VarStore, set to `det`'s values.
fn fresh() -> VarStore {
    let vs = VarStore::new(Device::Cpu);
    let root = vs.root();
    for (name, value) in [
        ("l1.weight", det(32, 1.0, &[8, 4])),
        ("l1.bias", det(8, 2.0, &[8])),
        ("l2.weight", det(16, 3.0, &[2, 8])),
        ("l2.bias", det(2, 4.0, &[2])),
    ] {
        let (layer, p) = name.split_once('.').unwrap();
        let var = (&root / layer).zeros(p, &value.size());
        tch::no_grad(|| var.shallow_clone().copy_(&value));
    }
    vs
}

fn loss(vs: &VarStore) -> Tensor {
    let v = vs.variables();
    let x = (Tensor::arange(64, (Kind::Double, Device::Cpu)) * 0.11)
        .cos()
        .to_kind(Kind::Float)
        .reshape([16, 4]);
    let t = (Tensor::arange(32, (Kind::Double, Device::Cpu)) * 0.23)
        .sin()
        .to_kind(Kind::Float)
        .reshape([16, 2]);
    let h = (x.matmul(&v["l1.weight"].tr()) + &v["l1.bias"]).tanh();
    let y = h.matmul(&v["l2.weight"].tr()) + &v["l2.bias"];
    (y - t).square().mean(Kind::Float)
}

fn train(vs: &VarStore, opt: &dyn Optimizer, steps: usize) {
    for _ in 0..steps {
        opt.backward_step(&loss(vs)).unwrap();
    }
}

fn values(vs: &VarStore) -> BTreeMap<String, Vec<f64>> {
    vs.variables()
        .into_iter()
        .map(|(k, v)| {
            (
                k,
                Vec::<f64>::try_from(v.flatten(0, -1).to_kind(Kind::Double)).unwrap(),
            )
        })
        .collect()
}

/// The six configurations, each as PyTorch's constructor has it.
fn configs(vs: &VarStore) -> Vec<(&'static str, Box<dyn Optimizer>)> {
    vec![
        (
            "adam_wd",
            Box::new(Adam::new(vs, 0.01).unwrap().weight_decay(0.1)),
        ),
        (
            "adam_amsgrad",
            Box::new(
                Adam::new(vs, 0.02)
                    .unwrap()
                    .betas(0.8, 0.99)
                    .eps(1e-6)
                    .amsgrad(true),
            ),
        ),
        (
            "adamw",
            Box::new(AdamW::new(vs, 0.01).unwrap().weight_decay(0.1)),
        ),
        (
            "sgd_momentum",
            Box::new(
                Sgd::new(vs, 0.05)
                    .unwrap()
                    .momentum(0.9)
                    .dampening(0.1)
                    .weight_decay(0.01),
            ),
        ),
        (
            "sgd_nesterov",
            Box::new(
                Sgd::new(vs, 0.05)
                    .unwrap()
                    .momentum(0.9)
                    .nesterov(true)
                    .weight_decay(0.01),
            ),
        ),
        ("sgd", Box::new(Sgd::new(vs, 0.1).unwrap())),
    ]
}

#[test]
fn optimizers_match_pytorch_over_20_steps() {
    let Some(json) = python(PY_SETUP) else {
        println!("skipped: no PyTorch python to compare with");
        return;
    };
    let expected: BTreeMap<String, BTreeMap<String, Vec<f64>>> =
        serde_json::from_str(&json).unwrap();
    let names: Vec<&str> = configs(&fresh()).iter().map(|(n, _)| *n).collect();
    for (i, name) in names.into_iter().enumerate() {
        let vs = fresh();
        let opt = configs(&vs).swap_remove(i).1;
        train(&vs, opt.as_ref(), STEPS);
        let got = values(&vs);
        let want = &expected[name];
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>()
        );
        let mut worst = 0.0_f64;
        for (k, w) in want {
            for (a, b) in got[k].iter().zip(w) {
                worst = worst.max((a - b).abs());
            }
        }
        println!("{name}: largest difference from PyTorch after {STEPS} steps: {worst:e}");
        assert!(worst <= 1e-6, "{name}: {worst:e} from PyTorch's weights");
        // The run moved the weights: the comparison is not of untouched values.
        let start = values(&fresh());
        assert!(
            start.iter().any(|(k, v)| v != &got[k]),
            "{name} took no step"
        );
    }
}

#[test]
fn state_round_trips_through_a_file_bitwise() {
    let dir = std::env::temp_dir().join(format!("tch-scope-optim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let names: Vec<&str> = configs(&fresh()).iter().map(|(n, _)| *n).collect();
    for (i, name) in names.into_iter().enumerate() {
        // Uninterrupted.
        let vs = fresh();
        let opt = configs(&vs).swap_remove(i).1;
        train(&vs, opt.as_ref(), STEPS);
        let whole = values(&vs);

        // Stopped after 7 steps: weights and optimizer state to a file.
        let vs = fresh();
        let opt = configs(&vs).swap_remove(i).1;
        train(&vs, opt.as_ref(), 7);
        let path = dir.join(format!("{name}.ot"));
        let mut named = opt.state();
        named.extend(vs.variables());
        Tensor::save_multi(
            &named
                .iter()
                .map(|(k, t)| (k.as_str(), t))
                .collect::<Vec<_>>(),
            &path,
        )
        .unwrap();
        drop((vs, opt));

        // Resumed in a fresh VarStore and optimizer.
        let vs = fresh();
        let opt = configs(&vs).swap_remove(i).1;
        let loaded = Tensor::load_multi(&path).unwrap();
        let (state, weights): (Vec<_>, Vec<_>) = loaded
            .into_iter()
            .partition(|(k, _)| k.starts_with(opt.name()));
        let vars = vs.variables();
        for (k, t) in &weights {
            tch::no_grad(|| vars[k].shallow_clone().copy_(t));
        }
        opt.load_state(&state).unwrap();
        train(&vs, opt.as_ref(), STEPS - 7);
        assert_eq!(
            values(&vs),
            whole,
            "{name}: the resumed run differs from the whole one"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_foreign_or_mismatched_state_is_refused_and_nothing_loaded() {
    let vs = fresh();
    let adam = Adam::new(&vs, 0.01).unwrap();
    train(&vs, &adam, 2);
    let sgd = Sgd::new(&vs, 0.1).unwrap().momentum(0.9);
    let e = sgd.load_state(&adam.state()).unwrap_err();
    assert!(e.to_string().starts_with("cannot load `Sgd`"), "{e}");
    assert!(e.to_string().contains("not a Sgd state"), "{e}");

    // A moment of the wrong shape: refused, the optimizer keeps its state.
    let before = adam.state();
    let mut bad = adam.state();
    let (_, t) = bad
        .iter_mut()
        .find(|(k, _)| k == "Adam.exp_avg.l1.bias")
        .unwrap();
    *t = Tensor::zeros([3], (Kind::Float, Device::Cpu));
    let e = adam.load_state(&bad).unwrap_err();
    assert!(e.to_string().contains("`exp_avg` of `l1.bias`"), "{e}");
    let after = adam.state();
    assert_eq!(before.len(), after.len());
    for ((ka, a), (kb, b)) in before.iter().zip(&after) {
        assert_eq!(ka, kb);
        assert!(a.equal(b), "{ka} changed by a refused load");
    }

    // An entry for a parameter this optimizer does not have.
    let mut extra = adam.state();
    extra.push((
        "Adam.exp_avg.l9.weight".into(),
        Tensor::zeros([1], (Kind::Float, Device::Cpu)),
    ));
    let e = adam.load_state(&extra).unwrap_err();
    assert!(e.to_string().contains("exp_avg.l9.weight"), "{e}");
}

#[test]
fn bad_settings_are_errors_naming_the_optimizer() {
    let vs = fresh();
    let e = Adam::new(&vs, -1.0).unwrap_err();
    assert_eq!(e.scope(), "Adam");
    assert!(e.reason().contains("learning rate"), "{e}");
    let e = Sgd::new(&vs, 0.1)
        .unwrap()
        .nesterov(true)
        .step()
        .unwrap_err();
    assert!(e.reason().contains("Nesterov"), "{e}");
    let empty = VarStore::new(Device::Cpu);
    let e = AdamW::new(&empty, 0.1).unwrap_err();
    assert!(e.reason().contains("no trainable variable"), "{e}");
}

#[test]
fn a_refused_operator_fails_the_step_and_the_step_count_stays() {
    use tch_scope::{Deadline, Scope};
    let vs = fresh();
    let adam = Adam::new(&vs, 0.01).unwrap();
    train(&vs, &adam, 1);
    loss(&vs).backward();
    let before = values(&vs);
    let e = {
        // Every operator from now on is refused: the update's first fails.
        let _deadline = Deadline::until(std::time::Instant::now()).enter().unwrap();
        adam.step().unwrap_err()
    };
    assert!(e.to_string().starts_with("cannot run `Adam` on cpu"), "{e}");
    assert!(
        e.reason()
            .contains("the update of parameter `l1.bias` failed"),
        "{e}"
    );
    assert_eq!(adam.steps_taken(), 1);
    assert_eq!(
        values(&vs),
        before,
        "a refused first operator changed a weight"
    );
}

/// A checkpoint keeps handles to its optimizer, not a borrow: a guard
/// leaked with `mem::forget` (safe code may) leaves nothing dangling for a
/// later `steps` loop, which still reaches the optimizer's state.
#[test]
fn a_leaked_checkpoint_guard_leaves_its_optimizer_reachable() {
    use tch_scope::{Checkpoint, Scope};
    let path = std::env::temp_dir().join(format!("tch-scope-leak-{}.ot", std::process::id()));
    let vs = fresh();
    {
        let adam = Adam::new(&vs, 0.01).unwrap();
        train(&vs, &adam, 1);
        let guard = Checkpoint::new(&vs, &path)
            .optimizer(&adam)
            .every(1)
            .enter()
            .unwrap();
        std::mem::forget(guard);
        // `adam` ends here; the leaked checkpoint is still this thread's
        // innermost.
    }
    let mut seen = 0;
    for step in tch_scope::steps(3) {
        loss(&vs).backward();
        seen += 1;
        assert_eq!(step, seen - 1);
    }
    assert_eq!(seen, 3);
    // Its periodic saves took the optimizer's state from the handle (the
    // last one may still be on the writer's thread: no exit waits for it).
    let saved = Checkpoint::read(&path).unwrap();
    assert!(
        (2..=3).contains(&saved.step),
        "saved at step {}",
        saved.step
    );
    assert!(!saved.optimizer.is_empty(), "no optimizer state saved");
    std::fs::remove_file(&path).ok();
}
