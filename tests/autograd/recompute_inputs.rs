//! `recompute` under a backward asked for some inputs only
//! (`torch.autograd.grad`, tch's `Tensor::run_backward`): the gradients
//! asked for are the plain block's and no other `.grad` is touched;
//! double backward (a gradient penalty) through a recomputed block. The
//! oracle is the same block run plainly.

use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};
use tch_scope::autograd::{Capture, f_recompute, recompute};

use super::rng;

struct Net {
    vs: nn::VarStore,
    pre: nn::Linear,
    lin: nn::Linear,
    x: Tensor,
}

fn net() -> Net {
    tch::manual_seed(3);
    let vs = nn::VarStore::new(Device::Cpu);
    let pre = nn::linear(vs.root() / "pre", 5, 6, Default::default());
    let lin = nn::linear(vs.root() / "lin", 6, 6, Default::default());
    let mut vs = vs;
    vs.double();
    let x = Tensor::randn([4, 5], (Kind::Double, Device::Cpu)).set_requires_grad(true);
    Net { vs, pre, lin, x }
}

fn body(h: &Tensor, lin: &nn::Linear) -> Tensor {
    lin.forward(h).tanh().dropout(0.2, true) * h
}

impl Net {
    /// The loss, with the block recomputed or plain; seeded dropout.
    fn loss(&self, recomputed: bool) -> Tensor {
        tch::manual_seed(7);
        let h = self.pre.forward(&self.x).sin();
        let y = if recomputed {
            let lin = self.lin.capture();
            recompute(&[&h], move |i| vec![body(i[0], &lin)]).remove(0)
        } else {
            body(&h, &self.lin)
        };
        (&y * &y).sum(Kind::Double)
    }

    fn params(&self) -> Vec<Tensor> {
        [&self.pre, &self.lin]
            .iter()
            .flat_map(|l| [l.ws.shallow_clone(), l.bs.as_ref().unwrap().shallow_clone()])
            .collect()
    }

    fn zero_grads(&self) {
        for mut v in self.vs.trainable_variables() {
            v.zero_grad();
        }
        let mut x = self.x.shallow_clone();
        x.zero_grad();
    }

    /// Every parameter's `.grad`, `None` where undefined.
    fn grads(&self) -> Vec<Option<Tensor>> {
        self.params()
            .iter()
            .chain([&self.x])
            .map(|p| {
                let g = p.grad();
                g.defined().then(|| g.copy())
            })
            .collect()
    }
}

#[track_caller]
fn assert_close(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!(a.size(), b.size(), "{what}");
    let diff = (a - b).abs().max().double_value(&[]);
    let scale = b.abs().max().double_value(&[]).max(1.0);
    assert!(diff <= 1e-12 * scale, "{what}: differs by {diff}");
}

#[test]
fn grad_of_an_input_through_recompute_touches_no_parameter() {
    let _rng = rng();
    let n = net();
    let mut want = None;
    for recomputed in [false, true] {
        n.zero_grads();
        let l = n.loss(recomputed);
        let g = Tensor::f_run_backward(&[&l], &[&n.x], false, false)
            .unwrap()
            .remove(0);
        assert!(g.defined() && g.abs().sum(Kind::Double).double_value(&[]) > 0.0);
        for (k, p) in n.grads().iter().enumerate() {
            assert!(
                p.is_none(),
                "recomputed {recomputed}: grad() for x wrote parameter {k}'s .grad"
            );
        }
        match &want {
            None => want = Some(g),
            Some(w) => assert!(
                g.equal(w),
                "the gradient of x differs from the plain block's"
            ),
        }
    }
}

#[test]
fn grad_of_captured_parameters_through_recompute_is_the_plain_blocks() {
    let _rng = rng();
    let n = net();
    let params = n.params();
    // Each parameter alone, then all of them with the input.
    let mut asks: Vec<Vec<&Tensor>> = params.iter().map(|p| vec![p]).collect();
    asks.push(params.iter().chain([&n.x]).collect());
    for ask in asks {
        n.zero_grads();
        let plain = Tensor::f_run_backward(&[n.loss(false)], &ask, false, false).unwrap();
        let got = Tensor::f_run_backward(&[n.loss(true)], &ask, false, false).unwrap();
        for (k, (p, g)) in plain.iter().zip(&got).enumerate() {
            assert!(p.defined(), "plain gradient {k} of {}", ask.len());
            assert!(
                g.defined(),
                "recompute gave no gradient for tensor {k} of {} asked for",
                ask.len()
            );
            assert!(p.equal(g), "gradient {k} of {} differs", ask.len());
        }
        assert!(n.grads().iter().all(Option::is_none), "a .grad was written");
    }
    // Plain backward still fills every .grad as the plain block does.
    n.zero_grads();
    n.loss(false).backward();
    let plain = n.grads();
    n.zero_grads();
    n.loss(true).backward();
    for (k, (p, g)) in plain.iter().zip(n.grads()).enumerate() {
        assert!(
            p.as_ref().unwrap().equal(&g.unwrap()),
            "backward(): grad {k}"
        );
    }
}

#[test]
fn a_gradient_penalty_through_recompute_matches_the_plain_block() {
    let _rng = rng();
    let mut want: Option<Vec<Option<Tensor>>> = None;
    for recomputed in [false, true] {
        // A fresh copy (same seed): `.grad` starts undefined.
        let n = net();
        let l = n.loss(recomputed);
        let g = Tensor::f_run_backward(&[&l], &[&n.x], true, true)
            .unwrap()
            .remove(0);
        assert!(g.requires_grad(), "recomputed {recomputed}: no graph");
        for (k, p) in n.grads().iter().enumerate() {
            assert!(
                p.is_none(),
                "recomputed {recomputed}: grad() for x wrote parameter {k}'s .grad"
            );
        }
        ((&g * &g).sum(Kind::Double) + l).backward();
        let got = n.grads();
        match &want {
            None => want = Some(got),
            Some(w) => {
                for (k, (a, b)) in got.iter().zip(w).enumerate() {
                    let (Some(a), Some(b)) = (a, b) else {
                        panic!("gradient {k}: {a:?} vs the plain block's {b:?}");
                    };
                    assert_close(a, b, &format!("gradient {k} (4 parameters, then x)"));
                }
            }
        }
    }
}

/// How a gradient is asked for in [`captured_tensors_used_before_the_block_get_their_gradient_once`].
#[derive(Debug, Clone, Copy)]
enum Ask {
    Backward,
    Grad(&'static [usize]),
    /// `sum(grad(l, [x, p], create_graph)²) + l`, backward.
    Penalty,
}

#[test]
fn captured_tensors_used_before_the_block_get_their_gradient_once() {
    let _rng = rng();
    // `p` is used before the block and inside it, captured either itself
    // (a leaf) or through `w = 2p` (not a leaf): its gradient must count
    // each path once, with a gradient penalty too (where the backward
    // through the block must stop at its input, whose graph reaches `p`).
    let p = Tensor::from_slice(&[0.5f64, -1.5, 2.0]).set_requires_grad(true);
    let x = Tensor::from_slice(&[1.0f64, 0.25, -0.75]).set_requires_grad(true);
    let run = |recomputed: bool, through_w: bool, ask: Ask| {
        let (p, x) = (
            p.detach().set_requires_grad(true),
            x.detach().set_requires_grad(true),
        );
        let c = if through_w {
            &p * 2.0
        } else {
            p.shallow_clone()
        };
        let h = &x * &p;
        let y = if recomputed {
            let c = c.capture();
            recompute(&[&h], move |i| vec![(i[0] * &c).tanh() * &c]).remove(0)
        } else {
            (&h * &c).tanh() * &c
        };
        let l = y.sum(Kind::Double);
        let both = [&x, &p];
        match ask {
            Ask::Grad(which) => {
                let ask: Vec<&Tensor> = which.iter().map(|&k| both[k]).collect();
                let g = Tensor::f_run_backward(&[&l], &ask, false, false).unwrap();
                assert!(
                    !p.grad().defined() && !x.grad().defined(),
                    "a .grad was written"
                );
                g
            }
            Ask::Backward => {
                l.backward();
                vec![x.grad(), p.grad()]
            }
            Ask::Penalty => {
                let g = Tensor::f_run_backward(&[&l], &both, true, true).unwrap();
                let penalty: Tensor = g.iter().map(|g| (g * g).sum(Kind::Double)).sum();
                (penalty + l).backward();
                vec![x.grad(), p.grad()]
            }
        }
    };
    for through_w in [false, true] {
        for ask in [
            Ask::Backward,
            Ask::Grad(&[1]),
            Ask::Grad(&[0, 1]),
            Ask::Penalty,
        ] {
            let plain = run(false, through_w, ask);
            let got = run(true, through_w, ask);
            for (k, (a, b)) in got.iter().zip(&plain).enumerate() {
                let what = format!("through w {through_w}, {ask:?}: gradient {k}");
                assert!(a.defined(), "{what}: none");
                assert_close(a, b, &what);
            }
        }
    }
}

#[test]
fn a_captured_tensor_whose_graph_reaches_another_captured_one_is_refused() {
    // The engine would run `w`'s graph (outside the block) in the backward
    // through the block and count `p`'s gradient twice: refused.
    let p = Tensor::from_slice(&[0.5f64, -1.5]).set_requires_grad(true);
    let x = Tensor::from_slice(&[1.0f64, 0.25]).set_requires_grad(true);
    let (w, p2) = ((&p * 2.0).capture(), p.capture());
    let e = f_recompute(&[&x], move |i| vec![i[0] * &w * &p2])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("recompute") && e.contains("captures a tensor") && e.contains("as an input"),
        "{e}"
    );
    // Passed as an input, it is fine.
    let w = &p * 2.0;
    let p2 = p.capture();
    let y = f_recompute(&[&x, &w], move |i| vec![i[0] * i[1] * &p2])
        .unwrap()
        .remove(0);
    y.sum(Kind::Double).backward();
    let want = Vec::<f64>::try_from((&x * &p * 4.0).detach()).unwrap();
    assert_eq!(Vec::<f64>::try_from(p.grad()).unwrap(), want);
}

#[test]
fn an_input_returned_as_it_is_gets_its_gradient_through_recompute() {
    let x = Tensor::from_slice(&[1.0f64, -2.0]).set_requires_grad(true);
    let y = Tensor::from_slice(&[0.5f64, 3.0]).set_requires_grad(true);
    let out = recompute(&[&x, &y], |i| vec![i[0].shallow_clone(), i[1] * 2.0]);
    let l = (&out[0] * &out[1]).sum(Kind::Double);
    let g = Tensor::f_run_backward(&[&l], &[&x, &y], false, false).unwrap();
    assert_eq!(Vec::<f64>::try_from(&g[0]).unwrap(), [1.0, 6.0]);
    assert_eq!(Vec::<f64>::try_from(&g[1]).unwrap(), [2.0, -4.0]);
    assert!(!x.grad().defined() && !y.grad().defined());
}
