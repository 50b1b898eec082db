//! `apply1` / `f_apply1`: a custom function of one output returns that
//! tensor, as PyTorch's `Function.apply` does; a function of two outputs
//! (or none) through the single form is an error naming the function.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use tch::{Device, Kind, Tensor};
use tch_scope::Stage;
use tch_scope::autograd::{Ctx, Function};

use super::{
    MulAdd, MulConstant, PanicsInForward, Relu, Two, assert_close, data, leaf, tensor, weighted,
};

/// Returns no outputs at all.
struct Nothing;

impl Function for Nothing {
    fn forward(&self, _ctx: &mut Ctx, _inputs: &[&Tensor]) -> Vec<Tensor> {
        Vec::new()
    }
    fn backward(&self, _ctx: &Ctx, _grads: &[Tensor]) -> Vec<Option<Tensor>> {
        unreachable!("no output, no backward")
    }
}

fn two() -> Two {
    Two {
        materialize: true,
        seen: Arc::new(Mutex::new(Vec::new())),
    }
}

fn ones() -> Tensor {
    Tensor::ones([3], (Kind::Double, Device::Cpu)).set_requires_grad(true)
}

#[test]
fn apply1_returns_what_apply_returns_and_pytorch_computes() {
    let d = data("relu");
    let (x1, xn) = (leaf(&d["x"], &d["shape"]), leaf(&d["x"], &d["shape"]));
    let single = Relu.apply1(&[&x1]);
    let multi = Relu.apply(&[&xn]).remove(0);
    assert!(single.requires_grad(), "the function's node is its grad_fn");
    assert!(single.equal(&multi), "bitwise apply's only output");
    assert_close(&single, &d["y"]);
    let w = tensor(&d["w"], &d["shape"]);
    weighted(&single, &w).backward();
    weighted(&multi, &w).backward();
    assert!(x1.grad().equal(&xn.grad()));
    assert_close(&x1.grad(), &d["grad_x"]);

    // The fallible form, with two inputs.
    let d = data("two_inputs");
    let a = leaf(&d["a"], &d["shape"]);
    let b = tensor(&d["b"], &d["shape"]);
    let y = MulAdd.f_apply1(&[&a, &b]).unwrap();
    assert_close(&y, &d["y"]);
    weighted(&y, &tensor(&d["w"], &d["shape"])).backward();
    assert_close(&a.grad(), &d["grad_a"]);
}

#[test]
fn two_outputs_or_none_through_apply1_are_an_error_naming_the_function() {
    let x = ones();
    let e = two().f_apply1(&[&x]).unwrap_err();
    assert_eq!(e.stage(), Stage::Run);
    assert_eq!(e.device(), Some(Device::Cpu));
    assert!(e.scope().ends_with("autograd::Two"), "{}", e.scope());
    let msg = e.to_string();
    assert!(
        msg.starts_with("cannot run `")
            && msg.contains("autograd::Two` on cpu")
            && msg.contains("returned 2 outputs")
            && msg.contains("`apply` returns them all"),
        "{msg}"
    );
    let e = Nothing.f_apply1(&[&x]).unwrap_err().to_string();
    assert!(
        e.contains("single_output::Nothing") && e.contains("returned 0 outputs"),
        "{e}"
    );

    // The panicking form says the same.
    let p = catch_unwind(AssertUnwindSafe(|| two().apply1(&[&x]))).unwrap_err();
    let p = p.downcast_ref::<String>().cloned().unwrap_or_default();
    assert_eq!(p, msg);

    // Nothing is left half done: autograd goes on.
    let y = MulConstant(4.0).apply1(&[&x]);
    y.sum(Kind::Double).backward();
    assert_eq!(Vec::<f64>::try_from(x.grad()).unwrap(), [4.0; 3]);
}

#[test]
fn a_panicking_forward_through_f_apply1_is_an_error_with_its_message() {
    let x = ones();
    let e = PanicsInForward.f_apply1(&[&x]).unwrap_err();
    assert_eq!(e.stage(), Stage::Run);
    let msg = e.to_string();
    assert!(
        msg.contains("autograd::PanicsInForward")
            && msg.contains("forward panicked: forward exploded on purpose"),
        "{msg}"
    );
    // apply1 panics with the forward's own payload, as apply does.
    let p = catch_unwind(AssertUnwindSafe(|| PanicsInForward.apply1(&[&x]))).unwrap_err();
    assert_eq!(
        p.downcast_ref::<&str>(),
        Some(&"forward exploded on purpose")
    );
    assert!(tch_scope::is_grad_enabled(), "grad mode restored");
}
