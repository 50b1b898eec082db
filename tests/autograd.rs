//! Custom autograd functions, gradcheck and recompute.
//!
//! The functions are written twice: here with `tch_scope::autograd::Function`
//! and in `scripts/export_autograd.py` with `torch.autograd.Function`, whose
//! outputs and gradients (and `torch.autograd.gradcheck`'s verdicts) are in
//! `tests/data/autograd.json`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};
use tch_scope::autograd::{Capture, Ctx, Function, f_recompute, gradcheck, recompute};
use tch_scope::{Scope, TensorMemory};

#[path = "autograd/gradcheck_layouts.rs"]
mod gradcheck_layouts;
#[path = "oracle.rs"]
mod oracle;
#[path = "autograd/recompute_inputs.rs"]
mod recompute_inputs;
#[path = "autograd/single_output.rs"]
mod single_output;

const DATA: &str = include_str!("data/autograd.json");

fn data(case: &str) -> Value {
    let all: Value = serde_json::from_str(DATA).unwrap();
    all[case].clone()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn shape(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

fn tensor(v: &Value, s: &Value) -> Tensor {
    Tensor::from_slice(&floats(v)).reshape(shape(s))
}

fn leaf(v: &Value, s: &Value) -> Tensor {
    tensor(v, s).set_requires_grad(true)
}

#[track_caller]
fn assert_close(t: &Tensor, want: &Value) {
    let got = Vec::<f64>::try_from(t.reshape([-1]).to_kind(Kind::Double)).unwrap();
    let want = floats(want);
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(&want) {
        assert!(
            (g - w).abs() <= 1e-12 * w.abs().max(1.0),
            "{got:?} vs {want:?}"
        );
    }
}

/// The loss PyTorch's side uses: sum(output * w).
fn weighted(y: &Tensor, w: &Tensor) -> Tensor {
    (y * w).sum(Kind::Double)
}

/// Tests that draw random numbers (parameter init, dropout) hold this, so
/// that seeded sequences are not interleaved by another test's draws.
static RNG: Mutex<()> = Mutex::new(());

fn rng() -> MutexGuard<'static, ()> {
    RNG.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---- the functions -------------------------------------------------------

struct Relu;

impl Function for Relu {
    fn forward(&self, ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        assert!(
            !tch_scope::is_grad_enabled(),
            "forward runs with grad mode off"
        );
        ctx.save_for_backward(&[inputs[0]]);
        vec![inputs[0].clamp_min(0.0)]
    }
    fn backward(&self, ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        let x = &ctx.saved_tensors()[0];
        vec![Some(&grads[0] * x.gt(0.0).to_kind(grads[0].kind()))]
    }
}

struct MulConstant(f64);

impl Function for MulConstant {
    fn forward(&self, _ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        vec![inputs[0] * self.0]
    }
    fn backward(&self, _ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        vec![Some(&grads[0] * self.0)]
    }
}

/// Forward multiplies by the constant, backward by 2: wrong unless c == 2.
struct MulConstantWrong(f64);

impl Function for MulConstantWrong {
    fn forward(&self, _ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        vec![inputs[0] * self.0]
    }
    fn backward(&self, _ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        vec![Some(&grads[0] * 2.0)]
    }
}

/// a * b + b.
struct MulAdd;

impl Function for MulAdd {
    fn forward(&self, ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        ctx.save_for_backward(inputs);
        ctx.save((inputs[0].requires_grad(), inputs[1].requires_grad()));
        vec![inputs[0] * inputs[1] + inputs[1]]
    }
    fn backward(&self, ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        let (&(ra, rb), saved) = (ctx.get::<(bool, bool)>().unwrap(), ctx.saved_tensors());
        assert_eq!((ctx.needs_input_grad(0), ctx.needs_input_grad(1)), (ra, rb));
        let (a, b) = (&saved[0], &saved[1]);
        vec![
            ctx.needs_input_grad(0).then(|| &grads[0] * b),
            ctx.needs_input_grad(1).then(|| &grads[0] * (a + 1.0)),
        ]
    }
}

struct Sort;

impl Function for Sort {
    fn forward(&self, ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        let (values, indices) = inputs[0].sort(-1, false);
        ctx.mark_non_differentiable(&[&indices]);
        ctx.save_for_backward(&[&indices]);
        vec![values, indices]
    }
    fn backward(&self, ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        let indices = &ctx.saved_tensors()[0];
        vec![Some(grads[0].zeros_like().scatter(-1, indices, &grads[0]))]
    }
}

struct MulInplace;

impl Function for MulInplace {
    fn forward(&self, ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        let mut x = inputs[0].shallow_clone();
        let _ = x.g_mul_scalar_(3.0);
        ctx.mark_dirty(&[&x]);
        vec![x]
    }
    fn backward(&self, _ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        vec![Some(&grads[0] * 3.0)]
    }
}

/// x³ with a differentiable backward (3x² from the saved input).
struct Cube;

impl Function for Cube {
    fn forward(&self, ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        ctx.save_for_backward(&[inputs[0]]);
        vec![inputs[0].pow_tensor_scalar(3)]
    }
    fn backward(&self, ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        let x = &ctx.saved_tensors()[0];
        vec![Some(&grads[0] * 3.0 * x * x)]
    }
}

// ---- against PyTorch -----------------------------------------------------

#[test]
fn relu_by_hand_matches_pytorch() {
    let d = data("relu");
    let x = leaf(&d["x"], &d["shape"]);
    let y = Relu.apply1(&[&x]);
    assert!(y.requires_grad());
    assert_close(&y, &d["y"]);
    weighted(&y, &tensor(&d["w"], &d["shape"])).backward();
    assert_close(&x.grad(), &d["grad_x"]);
}

#[test]
fn mul_constant_matches_pytorch() {
    let d = data("mul_constant");
    let x = leaf(&d["x"], &d["shape"]);
    let y = MulConstant(d["c"].as_f64().unwrap()).apply1(&[&x]);
    assert_close(&y, &d["y"]);
    weighted(&y, &tensor(&d["w"], &d["shape"])).backward();
    assert_close(&x.grad(), &d["grad_x"]);
}

#[test]
fn two_inputs_one_needing_no_grad_match_pytorch() {
    let d = data("two_inputs");
    let a = leaf(&d["a"], &d["shape"]);
    let b = tensor(&d["b"], &d["shape"]);
    let y = MulAdd.apply1(&[&a, &b]);
    assert_close(&y, &d["y"]);
    weighted(&y, &tensor(&d["w"], &d["shape"])).backward();
    assert_close(&a.grad(), &d["grad_a"]);
    assert!(d["grad_b"].is_null());
    assert!(!b.grad().defined());
}

#[test]
fn sort_with_non_differentiable_indices_matches_pytorch() {
    let d = data("sort");
    let x = leaf(&d["x"], &d["shape"]);
    let mut out = Sort.apply(&[&x]);
    let (values, indices) = (out.remove(0), out.remove(0));
    assert_close(&values, &d["values"]);
    assert_eq!(indices.kind(), Kind::Int64);
    let want: Vec<i64> = d["indices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(Vec::<i64>::try_from(indices.reshape([-1])).unwrap(), want);
    assert_eq!(
        indices.requires_grad(),
        d["indices_requires_grad"].as_bool().unwrap()
    );
    assert!(values.requires_grad());
    weighted(&values, &tensor(&d["w"], &d["shape"])).backward();
    assert_close(&x.grad(), &d["grad_x"]);
}

#[test]
fn in_place_with_mark_dirty_matches_pytorch() {
    let d = data("mark_dirty");
    let x = leaf(&d["x"], &d["shape"]);
    let x1 = &x * 1.0;
    let y = MulInplace.apply1(&[&x1]);
    assert_close(&y, &d["y"]);
    assert_close(&x1, &d["y"]); // modified in place
    assert_eq!(
        y.data_ptr() == x1.data_ptr(),
        d["same_storage"].as_bool().unwrap()
    );
    weighted(&y, &tensor(&d["w"], &d["shape"])).backward();
    assert_close(&x.grad(), &d["grad_x"]);
}

#[test]
fn mark_dirty_on_a_leaf_that_requires_grad_is_an_error() {
    let x = Tensor::ones([2], (Kind::Double, Device::Cpu)).set_requires_grad(true);
    let e = MulInplace.f_apply(&[&x]).unwrap_err().to_string();
    assert!(e.contains("leaf"), "{e}");
}

#[test]
fn double_backward_matches_pytorch() {
    let d = data("double_backward");
    let x = leaf(&d["x"], &d["shape"]);
    let y = Cube.apply1(&[&x]);
    assert_close(&y, &d["y"]);
    let first = Tensor::run_backward(&[y.sum(Kind::Double)], &[&x], true, true).remove(0);
    assert!(first.requires_grad(), "backward's own graph (create_graph)");
    assert_close(&first, &d["first"]);
    first.sum(Kind::Double).backward();
    assert_close(&x.grad(), &d["second"]);
}

// ---- semantics -----------------------------------------------------------

/// Two outputs (x * 2, x * 3); backward records whether each gradient came
/// defined.
struct Two {
    materialize: bool,
    seen: Arc<Mutex<Vec<(bool, f64)>>>,
}

impl Function for Two {
    fn forward(&self, ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        ctx.set_materialize_grads(self.materialize);
        vec![inputs[0] * 2.0, inputs[0] * 3.0]
    }
    fn backward(&self, _ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        let mut seen = self.seen.lock().unwrap();
        let mut total = grads[0].zeros_like();
        for (g, k) in grads.iter().zip([2.0, 3.0]) {
            seen.push((
                g.defined(),
                if g.defined() {
                    g.sum(Kind::Double).double_value(&[])
                } else {
                    f64::NAN
                },
            ));
            if g.defined() {
                total += g * k;
            }
        }
        vec![Some(total)]
    }
}

#[test]
fn absent_gradients_are_zeros_unless_materializing_is_off() {
    for materialize in [true, false] {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let x = Tensor::ones([3], (Kind::Double, Device::Cpu)).set_requires_grad(true);
        let out = Two {
            materialize,
            seen: seen.clone(),
        }
        .apply(&[&x]);
        out[0].sum(Kind::Double).backward(); // the second output unused
        assert_eq!(Vec::<f64>::try_from(x.grad()).unwrap(), [2.0; 3]);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen[0], (true, 3.0));
        if materialize {
            assert_eq!(seen[1], (true, 0.0));
        } else {
            assert!(!seen[1].0);
        }
    }
}

#[test]
fn without_grad_mode_outputs_have_no_graph() {
    let x = Tensor::ones([2], (Kind::Double, Device::Cpu)).set_requires_grad(true);
    let y = tch_scope::scoped!(no_grad => MulConstant(2.0).apply1(&[&x]));
    assert!(!y.requires_grad());
    let z = MulConstant(2.0).apply1(&[&Tensor::ones([2], (Kind::Double, Device::Cpu))]);
    assert!(!z.requires_grad());
}

/// Counts its drops.
struct Tracked(Arc<AtomicUsize>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

struct Saves(Arc<AtomicUsize>);

impl Function for Saves {
    fn forward(&self, ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        ctx.save(Tracked(self.0.clone()));
        ctx.save(String::from("kept"));
        vec![inputs[0] * 1.0]
    }
    fn backward(&self, ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        assert_eq!(ctx.get::<String>().map(String::as_str), Some("kept"));
        assert!(ctx.get::<Tracked>().is_some());
        assert!(ctx.get::<u8>().is_none());
        vec![Some(grads[0].shallow_clone())]
    }
}

#[test]
fn saved_values_live_until_the_node_is_freed() {
    let drops = Arc::new(AtomicUsize::new(0));
    let x = Tensor::ones([2], (Kind::Double, Device::Cpu)).set_requires_grad(true);
    let y = Saves(drops.clone()).apply1(&[&x]);
    let loss = y.sum(Kind::Double);
    loss.backward();
    assert_eq!(drops.load(Ordering::SeqCst), 0, "still held by y's node");
    drop((loss, y));
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    // Not executable: freed at once.
    let z = tch_scope::scoped!(no_grad => Saves(drops.clone()).apply(&[&x]));
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    drop(z);
}

/// Backward returns what `bad` says.
struct Bad(&'static str);

impl Function for Bad {
    fn forward(&self, _ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        vec![inputs[0] * 2.0]
    }
    fn backward(&self, _ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        let g = &grads[0] * 2.0;
        match self.0 {
            "count" => vec![Some(g.shallow_clone()), Some(g)],
            "shape" => vec![Some(Tensor::ones([5], (Kind::Double, Device::Cpu)))],
            "dtype" => vec![Some(g.to_kind(Kind::Float))],
            "broadcast" => vec![Some(g.unsqueeze(0).expand([4, -1], false) / 4.0)],
            "extra none" => vec![Some(g), None, None],
            "panic" => panic!("backward exploded on purpose"),
            _ => unreachable!(),
        }
    }
}

#[test]
fn wrong_gradients_from_backward_are_clear_errors() {
    for (kind, words) in [
        ("count", &["returned 2 gradients", "expected 1"][..]),
        ("shape", &["shape [5]", "index 0", "expected [3]"][..]),
        ("dtype", &["Float", "index 0", "expected Double"][..]),
        ("panic", &["panicked", "backward exploded on purpose"][..]),
    ] {
        let x = Tensor::ones([3], (Kind::Double, Device::Cpu)).set_requires_grad(true);
        let y = Bad(kind).apply1(&[&x]);
        let e = y.sum(Kind::Double).f_backward().unwrap_err().to_string();
        assert!(
            e.contains("autograd::Bad"),
            "{kind}: the function's name in {e}"
        );
        for w in words {
            assert!(e.contains(w), "{kind}: {w:?} in {e}");
        }
    }
    // A broadcast gradient is summed to the input's shape; trailing Nones are fine.
    for kind in ["broadcast", "extra none"] {
        let x = Tensor::ones([3], (Kind::Double, Device::Cpu)).set_requires_grad(true);
        Bad(kind).apply(&[&x])[0].sum(Kind::Double).backward();
        assert_eq!(Vec::<f64>::try_from(x.grad()).unwrap(), [2.0; 3], "{kind}");
    }
}

#[test]
fn a_panicking_backward_leaves_autograd_usable() {
    let x = Tensor::ones([3], (Kind::Double, Device::Cpu)).set_requires_grad(true);
    let y = Bad("panic").apply1(&[&x]);
    let e = y.sum(Kind::Double).f_backward().unwrap_err().to_string();
    assert!(e.contains("backward exploded on purpose"), "{e}");
    // tch's backward() panics with the message.
    let y = Bad("panic").apply1(&[&x]);
    let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        y.sum(Kind::Double).backward()
    }))
    .unwrap_err();
    let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("backward exploded on purpose"), "{msg}");
    // And autograd goes on.
    let z = MulConstant(4.0).apply1(&[&x]);
    z.sum(Kind::Double).backward();
    assert_eq!(Vec::<f64>::try_from(x.grad()).unwrap(), [4.0; 3]);
}

struct PanicsInForward;

impl Function for PanicsInForward {
    fn forward(&self, _ctx: &mut Ctx, _inputs: &[&Tensor]) -> Vec<Tensor> {
        panic!("forward exploded on purpose")
    }
    fn backward(&self, _ctx: &Ctx, _grads: &[Tensor]) -> Vec<Option<Tensor>> {
        unreachable!()
    }
}

#[test]
fn a_panicking_forward_panics_from_apply_and_errs_from_f_apply() {
    let x = Tensor::ones([3], (Kind::Double, Device::Cpu)).set_requires_grad(true);
    let e = PanicsInForward.f_apply(&[&x]).unwrap_err().to_string();
    assert!(
        e.contains("forward exploded on purpose") && e.contains("PanicsInForward"),
        "{e}"
    );
    let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        PanicsInForward.apply(&[&x])
    }))
    .unwrap_err();
    assert_eq!(
        p.downcast_ref::<&str>(),
        Some(&"forward exploded on purpose")
    );
    assert!(
        tch_scope::is_grad_enabled(),
        "grad mode restored after the panic"
    );
}

#[test]
fn backward_on_another_thread() {
    let d = data("relu");
    let x = leaf(&d["x"], &d["shape"]);
    let y = Relu.apply1(&[&x]);
    let loss = weighted(&y, &tensor(&d["w"], &d["shape"]));
    std::thread::spawn(move || loss.backward()).join().unwrap();
    assert_close(&x.grad(), &d["grad_x"]);
}

#[test]
fn four_threads_apply_custom_functions_at_once() {
    let relu = data("relu");
    let cube = data("double_backward");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (relu, cube) = (relu.clone(), cube.clone());
            std::thread::spawn(move || {
                for _ in 0..50 {
                    let x = leaf(&relu["x"], &relu["shape"]);
                    let y = Relu.apply1(&[&x]);
                    weighted(&y, &tensor(&relu["w"], &relu["shape"])).backward();
                    assert_close(&x.grad(), &relu["grad_x"]);
                    let x = leaf(&cube["x"], &cube["shape"]);
                    let y = Cube.apply1(&[&x]);
                    let g =
                        Tensor::run_backward(&[y.sum(Kind::Double)], &[&x], true, true).remove(0);
                    g.sum(Kind::Double).backward();
                    assert_close(&x.grad(), &cube["second"]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

// ---- gradcheck -------------------------------------------------------------

#[test]
fn gradcheck_agrees_with_pytorch() {
    let d = data("gradcheck");
    let x = Tensor::from_slice(&floats(&d["x"])).set_requires_grad(true);
    let a = Tensor::from_slice(&floats(&d["a"])).set_requires_grad(true);
    let b = Tensor::from_slice(&floats(&d["b"]));
    let verdicts = [
        (
            "mul_constant",
            gradcheck(|i| MulConstant(2.5).apply(i), &[&x]),
        ),
        (
            "mul_constant_wrong",
            gradcheck(|i| MulConstantWrong(2.5).apply(i), &[&x]),
        ),
        ("cube", gradcheck(|i| Cube.apply(i), &[&x])),
        ("mul_add", gradcheck(|i| MulAdd.apply(i), &[&a, &b])),
    ];
    for (name, verdict) in &verdicts {
        assert_eq!(
            verdict.is_ok(),
            d[*name].as_bool().unwrap(),
            "{name}: {verdict:?}"
        );
    }
    let e = verdicts[1].1.as_ref().unwrap_err();
    assert_eq!((e.output(), e.input()), (Some(0), Some(0)));
    // Analytical 2, numerical 2.5.
    assert!((e.max_difference().unwrap() - 0.5).abs() < 1e-6, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("output 0") && msg.contains("input 0") && msg.contains("largest difference"),
        "{msg}"
    );
    // The caller's tensors are untouched.
    assert!(!x.grad().defined());
}

#[test]
fn gradcheck_reports_a_wrong_count_or_shape_and_non_double_inputs() {
    let x = Tensor::from_slice(&[0.5f64, -1.0, 2.0]).set_requires_grad(true);
    let e = gradcheck(|i| Bad("count").apply(i), &[&x])
        .unwrap_err()
        .to_string();
    assert!(e.contains("returned 2 gradients"), "{e}");
    let e = gradcheck(|i| Bad("shape").apply(i), &[&x])
        .unwrap_err()
        .to_string();
    assert!(e.contains("shape [5]"), "{e}");
    let f = Tensor::from_slice(&[0.5f32]).set_requires_grad(true);
    let e = gradcheck(|i| vec![i[0] * 2.0], &[&f])
        .unwrap_err()
        .to_string();
    assert!(e.contains("Double"), "{e}");
    // A plain differentiable function passes.
    assert!(gradcheck(|i| vec![i[0].sin() * i[0], i[0].exp()], &[&x]).is_ok());
}

// ---- recompute -------------------------------------------------------------

#[tch_scope::recompute]
fn block(x: &Tensor, lin: &nn::Linear) -> Tensor {
    lin.forward(x).tanh().dropout(0.2, true)
}

fn plain_block(x: &Tensor, lin: &nn::Linear) -> Tensor {
    lin.forward(x).tanh().dropout(0.2, true)
}

#[tch_scope::recompute]
fn two_outputs(x: &Tensor, y: &Tensor, scale: f64) -> (Tensor, Tensor) {
    ((x * y * scale).dropout(0.5, true), (x + y).relu())
}

fn layers(vs: &nn::VarStore, n: usize, width: i64) -> Vec<nn::Linear> {
    (0..n)
        .map(|i| nn::linear(vs.root() / i, width, width, Default::default()))
        .collect()
}

/// Parameter and input gradients after a seeded forward + backward.
fn grads_of(
    x: &Tensor,
    lins: &[nn::Linear],
    vs: &nn::VarStore,
    f: impl Fn(&Tensor, &nn::Linear) -> Tensor,
) -> Vec<Tensor> {
    for mut v in vs.trainable_variables() {
        v.zero_grad();
    }
    let x = x.detach().set_requires_grad(true);
    tch::manual_seed(11);
    let mut h = x.shallow_clone();
    for lin in lins {
        h = f(&h, lin);
    }
    (&h * &h).sum(Kind::Float).backward();
    let mut out: Vec<Tensor> = lins
        .iter()
        .flat_map(|l| [l.ws.grad().copy(), l.bs.as_ref().unwrap().grad().copy()])
        .collect();
    out.push(x.grad().copy());
    out
}

#[test]
fn recompute_gradients_are_bitwise_those_of_the_plain_function() {
    let _rng = rng();
    tch::manual_seed(0);
    let vs = nn::VarStore::new(Device::Cpu);
    let lins = layers(&vs, 4, 16);
    let x = Tensor::randn([8, 16], (Kind::Float, Device::Cpu));
    let plain = grads_of(&x, &lins, &vs, plain_block);
    let attr = grads_of(&x, &lins, &vs, block);
    let closure = grads_of(&x, &lins, &vs, |x, lin| {
        let lin = lin.capture();
        recompute(&[x], move |i| {
            vec![lin.forward(i[0]).tanh().dropout(0.2, true)]
        })
        .remove(0)
    });
    assert_eq!(plain.len(), 9);
    for (k, ((p, a), c)) in plain.iter().zip(&attr).zip(&closure).enumerate() {
        assert!(
            p.abs().sum(Kind::Float).double_value(&[]) > 0.0,
            "gradient {k} is not all zeros"
        );
        assert!(p.equal(a), "#[recompute]: gradient {k} differs");
        assert!(p.equal(c), "recompute(): gradient {k} differs");
    }
    // Nested: a recompute inside a recomputed function.
    let nested = grads_of(&x, &lins, &vs, |x, lin| {
        let lin = lin.capture();
        recompute(&[x], move |i| vec![block(i[0], &lin)]).remove(0)
    });
    for (k, (p, n)) in plain.iter().zip(&nested).enumerate() {
        assert!(p.equal(n), "nested: gradient {k} differs");
    }
}

#[test]
fn recompute_returns_tuples_and_restores_the_generator() {
    let _rng = rng();
    let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0]).set_requires_grad(true);
    let y = Tensor::from_slice(&[0.5f64, -1.0, 1.5, 2.0]).set_requires_grad(true);
    let run = |recomputed: bool| {
        x.zero_grad_copy();
        y.zero_grad_copy();
        tch::manual_seed(5);
        let (a, b) = if recomputed {
            two_outputs(&x, &y, 3.0)
        } else {
            ((&x * &y * 3.0).dropout(0.5, true), (&x + &y).relu())
        };
        (a.sum(Kind::Double) + b.sum(Kind::Double) * 2.0).backward();
        // The backward's recomputation put the generator back.
        let next = Tensor::rand([4], (Kind::Double, Device::Cpu));
        (a, b, x.grad().copy(), y.grad().copy(), next)
    };
    let p = run(false);
    let r = run(true);
    assert!(p.0.equal(&r.0) && p.1.equal(&r.1), "outputs");
    assert!(p.2.equal(&r.2) && p.3.equal(&r.3), "gradients");
    assert!(p.4.equal(&r.4), "the draws after backward");
}

trait ZeroGradCopy {
    fn zero_grad_copy(&self);
}

impl ZeroGradCopy for Tensor {
    fn zero_grad_copy(&self) {
        let mut g = self.grad();
        if g.defined() {
            let _ = g.zero_();
        }
    }
}

#[test]
fn recompute_lowers_peak_tensor_bytes() {
    let _rng = rng();
    tch::manual_seed(1);
    let vs = nn::VarStore::new(Device::Cpu);
    let lins = layers(&vs, 8, 256);
    let x = Tensor::randn([128, 256], (Kind::Float, Device::Cpu));
    let step = |recomputed: bool| {
        let g = TensorMemory::new("autograd_recompute_peak")
            .enter()
            .unwrap();
        let mut h = x.shallow_clone();
        for lin in &lins {
            let f = |h: &Tensor, lin: &nn::Linear| {
                (lin.forward(h).gelu("none") * 2.0)
                    .tanh()
                    .dropout(0.1, true)
            };
            h = if recomputed {
                let lin = lin.capture();
                recompute(&[&h], move |i| vec![f(i[0], &lin)]).remove(0)
            } else {
                f(&h, lin)
            };
        }
        h.sum(Kind::Float).backward();
        drop(h);
        g.finish().expect("tensor_memory reports").peak_growth()
    };
    let plain = step(false);
    let recomputed = step(true);
    assert!(plain > 0);
    assert!(
        (recomputed as f64) < 0.6 * plain as f64,
        "recomputed peak {recomputed} B vs plain {plain} B"
    );
}

#[test]
fn recompute_gives_parameters_their_gradients_without_input_grad() {
    let _rng = rng();
    let vs = nn::VarStore::new(Device::Cpu);
    let lin = nn::linear(vs.root(), 3, 2, Default::default());
    let x = Tensor::ones([4, 3], (Kind::Float, Device::Cpu)); // no grad
    let l = lin.capture();
    let y = recompute(&[&x], move |i| vec![l.forward(i[0])]).remove(0);
    assert!(y.requires_grad());
    y.sum(Kind::Float).backward();
    let want = Tensor::full([2, 3], 4.0, (Kind::Float, Device::Cpu));
    assert!(lin.ws.grad().equal(&want));
}

#[test]
fn recompute_under_no_grad_or_inference_mode_is_a_plain_call() {
    let x = Tensor::ones([2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let calls = Arc::new(AtomicUsize::new(0));
    for inference in [false, true] {
        let c = calls.clone();
        let y = if inference {
            tch_scope::scoped!(inference_mode => f_recompute(&[&x], move |i| {
                c.fetch_add(1, Ordering::SeqCst);
                vec![i[0] * 2.0]
            }))
        } else {
            tch_scope::scoped!(no_grad => f_recompute(&[&x], move |i| {
                c.fetch_add(1, Ordering::SeqCst);
                vec![i[0] * 2.0]
            }))
        }
        .unwrap()
        .remove(0);
        assert!(!y.requires_grad());
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // A panicking body is an Err of f_recompute.
    let e = f_recompute(&[&x], |_| panic!("body exploded"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("body exploded"), "{e}");
}

/// Records, in `backward`, whether CPU autocast is on: the forward's scopes
/// reach `backward` only with `set_backward_scopes(true)`, as
/// `torch.amp.custom_fwd` / `custom_bwd` do.
struct SeesAutocast {
    keep: bool,
    seen: Arc<Mutex<Vec<Option<Kind>>>>,
}

impl Function for SeesAutocast {
    fn forward(&self, ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        ctx.set_backward_scopes(self.keep);
        assert_eq!(ctx.backward_scopes().is_some(), self.keep);
        vec![inputs[0] * 2.0]
    }

    fn backward(&self, _: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        let on = tch_scope::autocast_dtype(tch_scope::AutocastDevice::Cpu);
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(on);
        vec![Some(&grads[0] * 2.0)]
    }
}

#[test]
fn backward_scopes_re_enter_the_forwards_autocast_only_when_asked() {
    for keep in [false, true] {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let x = Tensor::ones([3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let f = SeesAutocast {
            keep,
            seen: Arc::clone(&seen),
        };
        let y = tch_scope::scoped!(autocast(cpu, bf16) => f.apply1(&[&x]));
        // Backward runs after the scope has ended.
        assert_eq!(
            tch_scope::autocast_dtype(tch_scope::AutocastDevice::Cpu),
            None
        );
        y.sum(Kind::Float).backward();
        let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let want = if keep { Some(Kind::BFloat16) } else { None };
        assert_eq!(seen, vec![want], "set_backward_scopes({keep})");
        assert_eq!(Vec::<f32>::try_from(x.grad()).unwrap(), vec![2.0; 3]);
        assert_eq!(
            tch_scope::autocast_dtype(tch_scope::AutocastDevice::Cpu),
            None
        );
    }
}
