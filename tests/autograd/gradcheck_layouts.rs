//! `gradcheck` on non-contiguous tensors: transposed, narrowed, step-sliced
//! and expanded inputs and outputs, each verdict against
//! `torch.autograd.gradcheck`'s, run live in the bootstrap's PyTorch.

use tch::{Device, Kind, Tensor};
use tch_scope::autograd::{Ctx, Function, gradcheck};

use super::oracle::python;

/// sin, by hand (a right backward).
struct Sin;

impl Function for Sin {
    fn forward(&self, ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        ctx.save_for_backward(&[inputs[0]]);
        vec![inputs[0].sin()]
    }
    fn backward(&self, ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        let x = &ctx.saved_tensors()[0];
        vec![Some(&grads[0] * x.cos())]
    }
}

/// sin, with a backward that returns zeros (wrong everywhere but where
/// cos is 0).
struct SinZeros;

impl Function for SinZeros {
    fn forward(&self, _ctx: &mut Ctx, inputs: &[&Tensor]) -> Vec<Tensor> {
        vec![inputs[0].sin()]
    }
    fn backward(&self, _ctx: &Ctx, grads: &[Tensor]) -> Vec<Option<Tensor>> {
        vec![Some(grads[0].zeros_like())]
    }
}

/// The same cases in PyTorch: `name verdict` lines, the verdict `pass`,
/// `fail` (a Jacobian mismatch) or `error` (gradcheck refuses an input with
/// a stride of 0).
const ORACLE: &str = r#"import torch
torch.set_default_dtype(torch.float64)
class Sin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos()
class SinZeros(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.sin()
    @staticmethod
    def backward(ctx, g):
        return torch.zeros_like(g)
base = (torch.arange(12.0) / 7.0 - 0.8).reshape(3, 4).requires_grad_()
row = (torch.arange(4.0) / 3.0 - 0.4).requires_grad_()
inputs = {
    "contiguous": lambda: base,
    "transposed": lambda: base.t(),
    "narrowed": lambda: base.narrow(1, 1, 2),
    "step_sliced": lambda: base[:, ::2],
    "expanded": lambda: row.expand(3, 4),
}
funcs = {
    "sin": Sin.apply,
    "sin_zeros": SinZeros.apply,
    "sin_then_transposed": lambda x: Sin.apply(x).t(),
    "sin_zeros_then_transposed": lambda x: SinZeros.apply(x).t(),
    "sin_then_step_sliced": lambda x: Sin.apply(x)[:, ::2],
    "sin_then_narrowed": lambda x: Sin.apply(x).narrow(0, 1, 1),
    "sin_then_expanded": lambda x: Sin.apply(x).unsqueeze(0).expand(2, *x.shape),
}
for i, make in inputs.items():
    for f, fn in funcs.items():
        try:
            ok = torch.autograd.gradcheck(fn, (make(),), eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=False)
            v = "pass" if ok else "fail"
        except RuntimeError as e:
            if "stride 0" not in str(e):
                raise
            v = "error"
        print(i, f, v)
"#;

fn input(name: &str) -> Tensor {
    let base = (Tensor::arange(12, (Kind::Double, Device::Cpu)) / 7.0 - 0.8)
        .reshape([3, 4])
        .set_requires_grad(true);
    let row = (Tensor::arange(4, (Kind::Double, Device::Cpu)) / 3.0 - 0.4).set_requires_grad(true);
    match name {
        "contiguous" => base,
        "transposed" => base.tr(),
        "narrowed" => base.narrow(1, 1, 2),
        "step_sliced" => base.slice(1, 0, None, 2),
        "expanded" => row.expand([3, 4], false),
        _ => unreachable!("{name}"),
    }
}

fn verdict(name: &str, x: &Tensor) -> (String, String) {
    let f = |i: &[&Tensor]| -> Vec<Tensor> {
        match name {
            "sin" => Sin.apply(i),
            "sin_zeros" => SinZeros.apply(i),
            "sin_then_transposed" => vec![Sin.apply1(i).tr()],
            "sin_zeros_then_transposed" => vec![SinZeros.apply1(i).tr()],
            "sin_then_step_sliced" => vec![Sin.apply1(i).slice(1, 0, None, 2)],
            "sin_then_narrowed" => vec![Sin.apply1(i).narrow(0, 1, 1)],
            "sin_then_expanded" => {
                let y = Sin.apply1(i);
                let mut shape = vec![2];
                shape.extend(y.size());
                vec![y.unsqueeze(0).expand(shape, false)]
            }
            _ => unreachable!("{name}"),
        }
    };
    match gradcheck(f, &[x]) {
        Ok(()) => ("pass".into(), String::new()),
        Err(e) if e.output().is_some() => ("fail".into(), e.to_string()),
        Err(e) => ("error".into(), e.to_string()),
    }
}

/// What gradcheck must decide whatever PyTorch is at hand: a backward of
/// zeros is caught through a transposed input, a right function with a
/// transposed output passes, and an input with a stride of 0 is refused.
#[test]
fn gradcheck_sees_through_transposed_inputs_and_outputs() {
    let t = input("transposed");
    assert!(!t.is_contiguous());
    let (v, msg) = verdict("sin_zeros", &t);
    assert_eq!(
        v, "fail",
        "a backward of zeros on a transposed input: {msg}"
    );
    let (v, msg) = verdict("sin", &t);
    assert_eq!(v, "pass", "sin on a transposed input: {msg}");
    let (v, msg) = verdict("sin_then_transposed", &input("contiguous"));
    assert_eq!(v, "pass", "sin(x).tr(): {msg}");
    let (v, msg) = verdict("sin", &input("expanded"));
    assert_eq!(v, "error", "an expanded input: {msg}");
    assert!(msg.contains("stride 0") && msg.contains("input 0"), "{msg}");
    // `f` sees the layout it was given; an expanded input that needs no
    // gradient is passed as it is.
    let strides = std::sync::Mutex::new(Vec::new());
    let row = Tensor::from_slice(&[0.5f64, -1.0, 2.0]).expand([4, 3], false);
    let r = gradcheck(
        |i| {
            strides.lock().unwrap().push((i[0].stride(), i[1].stride()));
            vec![i[0].sin() * i[1]]
        },
        &[&t, &row],
    );
    assert!(r.is_ok(), "{r:?}");
    let strides = strides.into_inner().unwrap();
    assert!(strides.len() > 2);
    assert!(
        strides.iter().all(|s| *s == (vec![1, 4], vec![0, 1])),
        "{strides:?}"
    );
    // The caller's tensor is neither changed nor given a gradient.
    let x = input("contiguous");
    let before = x.copy();
    let t = x.tr();
    let _ = verdict("sin", &t);
    assert!(x.equal(&before));
    assert!(!x.grad().defined());
}

#[test]
fn gradcheck_verdicts_on_strided_tensors_are_pytorchs() {
    let Some(oracle) = python(ORACLE) else {
        println!("skipped: no PyTorch python beside .libtorch (or TCH_SCOPE_PYTHON)");
        return;
    };
    let mut cases = 0;
    for line in oracle.lines() {
        let mut w = line.split_whitespace();
        let (Some(i), Some(f), Some(want)) = (w.next(), w.next(), w.next()) else {
            panic!("oracle line {line:?}");
        };
        let (got, msg) = verdict(f, &input(i));
        assert_eq!(got, want, "input {i}, function {f}: {msg}");
        cases += 1;
    }
    assert_eq!(cases, 5 * 7, "{oracle}");
}
