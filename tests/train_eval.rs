//! `eval(model)` / `train(model)` on real models: TorchScript modules
//! exported by `scripts/export_models.py` (expected values from PyTorch
//! 2.13), and `tch::nn` modules wrapped in `WithMode`.
//!
//! A forward pass in training mode moves BatchNorm's running stats, so every
//! test loads its own fresh copy of the model.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

use tch::nn::{self, ModuleT};
use tch::{CModule, Device, Kind, TchError, Tensor};
use tch_scope::{
    Mode, Scope, Trainable, WithMode, eval, is_grad_enabled, scope, scoped, train, try_scoped,
};

use crate::util::{YieldOnce, poll_once};

/// tests/data (the GPU bundle's copy when run from one).
fn data(name: &str) -> std::path::PathBuf {
    crate::bundle::tests_dir().join("data").join(name)
}

fn load(name: &str) -> CModule {
    CModule::load(data(name)).unwrap()
}

/// The values of `"key": [..]` in bn_dropout.json (one key per line).
fn json(key: &str) -> Vec<String> {
    let text = std::fs::read_to_string(data("bn_dropout.json")).unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("\"{key}\":")))
        .unwrap_or_else(|| panic!("no {key} in bn_dropout.json"));
    let list = &line[line.find('[').unwrap() + 1..line.rfind(']').unwrap()];
    list.split(',').map(|v| v.trim().to_owned()).collect()
}

fn floats(key: &str) -> Vec<f32> {
    json(key).iter().map(|v| v.parse().unwrap()).collect()
}

fn bools(key: &str) -> Vec<bool> {
    json(key).iter().map(|v| v == "true").collect()
}

fn tensor(key: &str) -> Tensor {
    let shape: Vec<i64> = json(&format!("{key}_shape"))
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    Tensor::from_slice(&floats(key)).reshape(shape)
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

fn running_mean(model: &CModule) -> Tensor {
    model.method_ts::<Tensor>("running_mean", &[]).unwrap()
}

#[test]
fn eval_output_matches_pytorch() {
    let model = load("bn_dropout.pt");
    let x = tensor("input");
    let y = scoped!(no_grad, eval(model) => model.forward_ts(&[&x]).unwrap());
    assert!(
        max_diff(&y, &tensor("eval_output")) < 1e-6,
        "{y} vs PyTorch {}",
        tensor("eval_output")
    );
    assert_eq!(model.modes().unwrap(), bools("bn_dropout_modes"));
    assert!(
        model.modes().unwrap().iter().all(|&t| t),
        "back in training"
    );
}

#[test]
fn eval_does_not_imply_no_grad() {
    let model = load("bn_dropout.pt");
    assert!(scoped!(eval(model) => is_grad_enabled()));
    assert!(!scoped!(no_grad, eval(model) => is_grad_enabled()));
}

#[test]
fn training_mode_comes_back_after_a_panic() {
    let model = load("bn_dropout.pt");
    let r = catch_unwind(AssertUnwindSafe(|| {
        scoped!(eval(model) => {
            assert_eq!(model.modes().unwrap(), vec![false; 5]);
            panic!("body failed");
        })
    }));
    assert!(r.is_err());
    assert_eq!(model.modes().unwrap(), vec![true; 5]);
}

#[test]
fn mixed_submodule_modes_come_back_exactly() {
    let model = load("mixed_modes.pt");
    let saved = bools("mixed_modes");
    assert_eq!(model.modes().unwrap(), saved, "as PyTorch saved them");
    assert!(saved.contains(&true) && saved.contains(&false));

    scoped!(eval(model) => assert_eq!(model.modes().unwrap(), vec![false; 5]));
    assert_eq!(model.modes().unwrap(), saved);

    scoped!(train(model) => {
        assert_eq!(model.modes().unwrap(), vec![true; 5]);
        scoped!(eval(model) => assert_eq!(model.modes().unwrap(), vec![false; 5]));
        assert_eq!(model.modes().unwrap(), vec![true; 5]);
    });
    assert_eq!(model.modes().unwrap(), saved);

    // The module as saved has BatchNorm and Dropout in eval: its plain
    // forward is PyTorch's eval output.
    let y = tch::no_grad(|| model.forward_ts(&[tensor("input")]).unwrap());
    assert!(max_diff(&y, &tensor("eval_output")) < 1e-6);
}

#[test]
fn train_updates_batchnorm_stats_and_eval_leaves_them() {
    let model = load("mixed_modes.pt");
    let x = tensor("input");
    let initial = Tensor::from_slice(&floats("running_mean"));
    assert!(max_diff(&running_mean(&model), &initial) < 1e-7);

    let _ = scoped!(no_grad, eval(model) => model.forward_ts(&[&x]).unwrap());
    assert!(
        max_diff(&running_mean(&model), &initial) < 1e-7,
        "eval left the stats alone"
    );

    let _ = scoped!(no_grad, train(model) => model.forward_ts(&[&x]).unwrap());
    assert!(
        max_diff(&running_mean(&model), &initial) > 1e-3,
        "train moved the stats"
    );
    // BatchNorm is back in eval (as saved), now with the moved stats.
    assert_eq!(model.modes().unwrap(), bools("mixed_modes"));
    let y = tch::no_grad(|| model.forward_ts(&[&x]).unwrap());
    assert!(max_diff(&y, &tensor("eval_output")) > 1e-4);
}

#[test]
fn awaiting_body_leaves_the_mode_between_polls() {
    let model = load("bn_dropout.pt");
    let fut = async {
        scoped!(eval(model) => {
            let before = model.modes().unwrap()[0];
            YieldOnce::default().await;
            (before, model.modes().unwrap()[0])
        })
    };
    let mut fut = std::pin::pin!(fut);
    assert!(poll_once(fut.as_mut()).is_pending());
    assert!(model.modes().unwrap()[0], "training between polls");
    let std::task::Poll::Ready(inside) = poll_once(fut.as_mut()) else {
        panic!("not done after two polls");
    };
    assert_eq!(inside, (false, false));
    assert!(model.modes().unwrap()[0]);
}

#[test]
fn with_mode_switches_dropout() {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = WithMode::new(
        nn::seq_t()
            .add_fn_t(|x, train| x.dropout(0.5, train))
            .add(nn::func(|x| x * 1.0)),
    );
    let x = Tensor::ones([1000], (Kind::Float, Device::Cpu));
    let zeros = |y: &Tensor| y.eq(0.0).sum(Kind::Int64).int64_value(&[]);

    assert!(model.is_training(), "training by default, as in PyTorch");
    assert!(zeros(&model.forward(&x)) > 300, "dropout active");
    let y = scoped!(eval(model) => model.forward(&x));
    assert!(y.equal(&x), "identity in eval");
    assert!(zeros(&model.forward(&x)) > 300, "active again");

    model.set_training(false).unwrap();
    let y = scoped!(train(model) => model.forward(&x));
    assert!(zeros(&y) > 300);
    assert!(!model.is_training(), "eval again");
    drop(vs);
}

#[test]
fn with_mode_batchnorm_stats() {
    let vs = nn::VarStore::new(Device::Cpu);
    let bn = WithMode::new(nn::batch_norm1d(vs.root(), 3, Default::default()));
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 5.0, 6.0, 7.0]).reshape([2, 3]);
    let before = bn.running_mean.copy(); // through Deref

    let _ = scoped!(no_grad, eval(bn) => bn.forward(&x));
    assert!(bn.running_mean.equal(&before));
    let _ = scoped!(no_grad, train(bn) => bn.forward(&x));
    assert!(!bn.running_mean.equal(&before));
    // Used as a plain `tch::nn::ModuleT` too.
    let _ = bn.forward_t(&x, false);
}

#[eval(model)]
fn validate(model: &mut CModule, x: &Tensor) -> (Tensor, Vec<bool>) {
    let y = tch::no_grad(|| model.forward_ts(&[x]).unwrap());
    (y, model.modes().unwrap().to_vec())
}

#[scope(no_grad, train(model))]
fn train_step(model: &CModule, x: &Tensor) -> (bool, bool) {
    let _ = model.forward_ts(&[x]).unwrap();
    (is_grad_enabled(), model.modes().unwrap()[0])
}

#[train(model)]
fn is_training_inside(model: &WithMode<nn::Func<'static>>) -> bool {
    model.is_training()
}

struct Validator {
    net: WithMode<nn::Func<'static>>,
}

impl Validator {
    #[eval(self.net)]
    fn run(&self) -> bool {
        self.net.is_training()
    }
}

#[test]
fn attributes() {
    let mut model = load("bn_dropout.pt");
    let (y, inside) = validate(&mut model, &tensor("input"));
    assert!(max_diff(&y, &tensor("eval_output")) < 1e-6);
    assert_eq!(inside, vec![false; 5]);
    assert_eq!(model.modes().unwrap(), vec![true; 5]);

    let model = load("mixed_modes.pt");
    assert_eq!(train_step(&model, &tensor("input")), (false, true));
    assert_eq!(model.modes().unwrap(), bools("mixed_modes"));

    let v = Validator {
        net: WithMode::new(nn::func(|x| x.shallow_clone())),
    };
    assert!(!v.run());
    assert!(v.net.is_training());
    v.net.set_training(false).unwrap();
    assert!(is_training_inside(&v.net));
    assert!(!v.net.is_training());
}

#[test]
fn trainable_through_pointers() {
    let model = std::sync::Arc::new(load("bn_dropout.pt"));
    let boxed: Box<dyn Fn() -> bool> = {
        let m = model.clone();
        Box::new(move || scoped!(eval(m) => !m.modes().unwrap()[0]))
    };
    assert!(boxed());
    let r = &model;
    assert!(scoped!(eval(r) => !r.modes().unwrap()[0]));
    assert_eq!(model.modes().unwrap(), vec![true; 5]);
}

/// A model whose switch fails half way: the scope reports it and puts back
/// what it had found.
struct Flaky {
    training: Cell<bool>,
}

impl Trainable for Flaky {
    type Modes = bool;
    fn modes(&self) -> Result<bool, TchError> {
        Ok(self.training.get())
    }
    fn set_training(&self, on: bool) -> Result<(), TchError> {
        self.training.set(on);
        Err(TchError::Torch("device lost".into()))
    }
    fn restore_modes(&self, modes: bool) -> Result<(), TchError> {
        self.training.set(modes);
        Ok(())
    }
}

#[test]
fn a_failed_switch_is_a_scope_error_and_restores() {
    let model = Flaky {
        training: Cell::new(true),
    };
    let e = try_scoped!(no_grad, eval(model) => ()).unwrap_err();
    assert_eq!(e.scope(), "eval");
    assert_eq!(
        e.to_string(),
        "cannot enter `eval`: Internal torch error: device lost"
    );
    assert!(model.training.get());
    assert!(is_grad_enabled());
    assert!(Mode::train(&model).enter().is_err());
}

// ---- models shared between threads -------------------------------

/// Two threads hold `eval` on one `Arc<CModule>`; the first in leaves
/// first: the model stays in eval mode until the second leaves, then all
/// its modes come back.
#[test]
fn two_eval_scopes_from_two_threads_share_the_mode() {
    use std::sync::{Arc, Barrier};
    let model = Arc::new(load("mixed_modes.pt"));
    let saved = model.modes().unwrap().to_vec();
    let barrier = Arc::new(Barrier::new(2));
    let spawn = |first: bool| {
        let (model, barrier) = (Arc::clone(&model), Arc::clone(&barrier));
        std::thread::Builder::new()
            .name(format!("model-{}", u8::from(!first) + 1))
            .spawn(move || {
                if !first {
                    barrier.wait(); // 1: T1 is in
                }
                let g = Mode::eval(&*model).enter().unwrap();
                if first {
                    barrier.wait(); // 1
                }
                barrier.wait(); // 2: both in
                let both = model.modes().unwrap().to_vec();
                if first {
                    drop(g);
                    barrier.wait(); // 3: T1 out
                    (both, Vec::new())
                } else {
                    barrier.wait(); // 3
                    let after_t1 = model.modes().unwrap().to_vec();
                    // The other mode from this thread while T1's is gone:
                    // nested in its own scope, allowed.
                    drop(g);
                    (both, after_t1)
                }
            })
            .unwrap()
    };
    let (t1, t2) = (spawn(true), spawn(false));
    let (b1, _) = t1.join().unwrap();
    let (b2, after_t1) = t2.join().unwrap();
    assert_eq!(b1, vec![false; 5]);
    assert_eq!(b2, vec![false; 5]);
    assert_eq!(after_t1, vec![false; 5], "still eval: T2 holds it");
    assert_eq!(
        model.modes().unwrap().to_vec(),
        saved,
        "as before the first"
    );
}

#[test]
fn the_other_mode_from_another_thread_is_refused() {
    use std::sync::Arc;
    let model = Arc::new(load("bn_dropout.pt"));
    let g = Mode::eval(&*model).enter().unwrap();
    let m = Arc::clone(&model);
    let e = std::thread::Builder::new()
        .name("trainer".into())
        .spawn(move || Mode::train(&*m).enter().map(drop).unwrap_err())
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(
        e.to_string(),
        format!(
            "cannot enter `train`: train(model) conflicts with eval(model) held by thread {}",
            std::thread::current().name().unwrap()
        )
    );
    assert_eq!(model.modes().unwrap().to_vec(), vec![false; 5], "untouched");
    drop(g);
    assert_eq!(model.modes().unwrap().to_vec(), vec![true; 5]);
}

#[test]
fn two_eval_scopes_left_out_of_order_on_one_thread() {
    let model = load("mixed_modes.pt");
    let saved = model.modes().unwrap().to_vec();
    let a = Mode::eval(&model).enter().unwrap();
    let b = Mode::eval(&model).enter().unwrap();
    drop(a);
    assert_eq!(
        model.modes().unwrap().to_vec(),
        vec![false; 5],
        "b still open"
    );
    drop(b);
    assert_eq!(model.modes().unwrap().to_vec(), saved);
    // train inside eval, the outer left first: the inner's mode stays.
    let a = Mode::eval(&model).enter().unwrap();
    let b = Mode::train(&model).enter().unwrap();
    drop(a);
    assert_eq!(model.modes().unwrap().to_vec(), vec![true; 5]);
    drop(b);
    assert_eq!(model.modes().unwrap().to_vec(), saved);
}

/// 4 threads × 50 calls on one `Arc<Inference<CModule>>`: every output is
/// PyTorch's eval output, and the model comes back in its modes.
#[test]
fn inference_shared_by_four_threads_matches_pytorch() {
    use std::sync::Arc;
    use tch_scope::Inference;
    fn shared<T: Send + Sync>(_: &T) {}
    let model = load("bn_dropout.pt");
    let before = model.modes().unwrap().to_vec();
    let served = Arc::new(Inference::new(model).unwrap());
    shared(&served);
    assert_eq!(served.get_ref().modes().unwrap().to_vec(), vec![false; 5]);
    let want = tensor("eval_output");
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (served, x, want) = (Arc::clone(&served), tensor("input"), want.shallow_clone());
            std::thread::spawn(move || {
                for _ in 0..50 {
                    let y = served.run(|m| {
                        assert!(tch_scope::is_inference_mode_enabled());
                        m.forward_ts(&[&x]).unwrap()
                    });
                    assert!(max_diff(&y, &want) < 1e-6, "{y} vs PyTorch {want}");
                }
                50
            })
        })
        .collect();
    let calls: i32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(calls, 200);
    let model = Arc::into_inner(served).unwrap().into_inner();
    assert_eq!(model.modes().unwrap().to_vec(), before);
    // BatchNorm's running stats untouched by 200 eval calls.
    let y = scoped!(no_grad, eval(model) => model.forward_ts(&[tensor("input")]).unwrap());
    assert!(max_diff(&y, &want) < 1e-6);
}

/// A served model stays in eval mode: a `train` scope on it is refused,
/// inside `run` and outside, on another thread too; a direct switch is
/// refused; an `eval` scope is allowed and writes nothing. After every
/// attempt the model answers exactly PyTorch's eval output, and its
/// BatchNorm statistics are untouched.
#[test]
fn a_served_model_cannot_be_switched_to_training() {
    use std::sync::Arc;
    use tch_scope::Inference;
    let model = load("bn_dropout.pt");
    let before = model.modes().unwrap().to_vec();
    let mean = running_mean(&model);
    let served = Arc::new(Inference::new(model).unwrap());
    let want = tensor("eval_output");
    let answers = |served: &Inference<CModule>| {
        let y = served.run(|m| m.forward_ts(&[tensor("input")]).unwrap());
        assert!(max_diff(&y, &want) < 1e-6, "{y} vs PyTorch {want}");
    };

    let e = Mode::train(served.get_ref()).enter().unwrap_err();
    assert_eq!(e.scope(), "train");
    assert!(e.reason().contains("served by an `Inference`"), "{e}");
    let inside = served.run(|m| Mode::train(m).enter().map(drop));
    assert!(inside.is_err(), "train inside run");
    let e = served.run(|m| m.set_training(true)).unwrap_err();
    assert!(e.to_string().contains("served by an `Inference`"), "{e}");
    let saved = served.get_ref().modes().unwrap();
    assert!(served.get_ref().restore_modes(saved).is_err());
    let other = Arc::clone(&served);
    let from_thread = std::thread::spawn(move || {
        let r = try_scoped!(train(other.get_ref()) => ());
        r.is_err()
    });
    assert!(from_thread.join().unwrap(), "train from another thread");
    assert_eq!(served.get_ref().modes().unwrap().to_vec(), vec![false; 5]);
    answers(&served);

    // eval is what the model is in: allowed, and nothing is written.
    served.run(|m| scoped!(eval(m) => assert!(!m.modes().unwrap()[0])));
    answers(&served);
    assert!(max_diff(&running_mean(served.get_ref()), &mean) == 0.0);

    let model = Arc::into_inner(served).unwrap().into_inner();
    assert_eq!(model.modes().unwrap().to_vec(), before);
    // Not served any more: train works again.
    scoped!(train(model) => assert!(model.modes().unwrap()[0]));
}

/// `Inference::new` is refused while a `train` scope on the model is open,
/// and the model is left as the scope has it; once the scope ends it comes
/// back to its modes, not to training mode under a served model.
#[test]
fn inference_is_refused_while_the_model_trains() {
    use std::sync::Arc;
    use tch_scope::Inference;
    let model = Arc::new(load("bn_dropout.pt"));
    let before = model.modes().unwrap().to_vec();
    {
        let _training = Mode::train(&*model).enter().unwrap();
        let e = Inference::new(Arc::clone(&model)).unwrap_err();
        assert_eq!(e.scope(), "Inference::new");
        assert!(e.reason().contains("train(model)"), "{e}");
        assert_eq!(model.modes().unwrap().to_vec(), vec![true; 5]);
    }
    assert_eq!(model.modes().unwrap().to_vec(), before);
    // An eval scope open meanwhile: the Inference joins it, and the modes
    // come back after both.
    let outer = Mode::eval(&*model).enter().unwrap();
    let served = Inference::new(Arc::clone(&model)).unwrap();
    drop(outer);
    assert_eq!(
        model.modes().unwrap().to_vec(),
        vec![false; 5],
        "still served"
    );
    assert!(Mode::train(&*model).enter().is_err());
    drop(served);
    assert_eq!(model.modes().unwrap().to_vec(), before);
}
