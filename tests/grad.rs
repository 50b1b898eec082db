//! no_grad, enable_grad, grad(…), inference_mode: semantics as in PyTorch.

use tch_scope::{scoped, try_scoped};

use crate::util::{fresh, leaf, state};

#[test]
fn no_grad_turns_grad_off_and_restores() {
    let w = leaf();
    let y = scoped!(no_grad => {
        assert!(!tch_scope::is_grad_enabled());
        &w * 2
    });
    assert!(!y.requires_grad());
    assert!((&w * 2).requires_grad());
    assert_eq!(state(), fresh());
}

#[test]
fn inner_grad_word_wins_when_nested() {
    scoped!(no_grad => {
        scoped!(enable_grad => {
            assert!(tch_scope::is_grad_enabled());
            assert!((&leaf() * 2).requires_grad());
        });
        assert!(!tch_scope::is_grad_enabled());
        scoped!(grad(true) => assert!(tch_scope::is_grad_enabled()));
        scoped!(grad(false) => assert!(!tch_scope::is_grad_enabled()));
    });
    scoped!(enable_grad => scoped!(no_grad => assert!(!tch_scope::is_grad_enabled())));
    assert_eq!(state(), fresh());
}

#[test]
fn conditional_entry_only_when_the_condition_holds() {
    for training in [true, false] {
        let grad = scoped!(no_grad if !training => tch_scope::is_grad_enabled());
        assert_eq!(grad, training);
    }
    let mut evaluated = 0;
    let on = |n: &mut i32| {
        *n += 1;
        true
    };
    scoped!(inference_mode if on(&mut evaluated) => assert!(tch_scope::is_inference_mode_enabled()));
    assert_eq!(evaluated, 1, "the condition is evaluated once");
    assert_eq!(state(), fresh());
}

#[test]
fn inference_mode_makes_inference_tensors() {
    let w = leaf();
    let (y, grad_inside) = scoped!(inference_mode => (&w * 2, tch_scope::is_grad_enabled()));
    assert!(!grad_inside);
    assert!(y.is_inference());
    assert!(!y.requires_grad());
    assert!(!(&w * 2).is_inference());
    assert_eq!(state(), fresh());
}

// PyTorch 2.13 (the oracle): inside inference_mode, enable_grad turns grad
// mode on, but `a * 2` with `a.requires_grad` is an inference tensor that
// does not require grad.
#[test]
fn enable_grad_inside_inference_mode_matches_pytorch() {
    scoped!(inference_mode => {
        scoped!(enable_grad => {
            assert!(tch_scope::is_grad_enabled());
            assert!(tch_scope::is_inference_mode_enabled());
            let a = leaf();
            let b = &a * 2;
            assert!(a.requires_grad());
            assert!(!b.requires_grad());
            assert!(b.is_inference());
        });
        assert!(!tch_scope::is_grad_enabled());
    });
    assert_eq!(state(), fresh());
}

#[test]
fn list_order_is_nesting_order() {
    // First word outermost: enable_grad inside inference_mode.
    let (grad, inf) = scoped!(inference_mode, enable_grad => (
        tch_scope::is_grad_enabled(),
        tch_scope::is_inference_mode_enabled()
    ));
    assert!(grad && inf);
    assert_eq!(state(), fresh());
}

#[test]
fn try_scoped_gives_the_value() {
    let v = try_scoped!(no_grad, inference_mode => 40 + 2).unwrap();
    assert_eq!(v, 42);
    assert_eq!(state(), fresh());
}

#[test]
fn backward_after_scope_still_works() {
    let w = leaf();
    let frozen = scoped!(no_grad => &w * 3);
    let loss = (&w * &frozen).sum(tch::Kind::Float);
    loss.backward();
    let g = w.grad();
    assert_eq!(g.double_value(&[0, 0]), 3.0);
}

/// `(grad, inference, is_inference of a tensor made there)` in three
/// places, as PyTorch's python (the bootstrap's, beside `.libtorch`)
/// reports them: `inference_mode(False)` inside `inference_mode()`, inside
/// `no_grad()`, and alone; then the outer state after leaving the first.
const ORACLE: &str = "import torch
def here(t): return (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), t.is_inference())
out = []
with torch.inference_mode():
    with torch.inference_mode(False):
        out.append(here(torch.ones(1)))
    out.append(here(torch.ones(1)))
with torch.no_grad():
    with torch.inference_mode(False):
        out.append(here(torch.ones(1)))
with torch.inference_mode(False):
    out.append(here(torch.ones(1)))
print(' '.join(''.join('1' if b else '0' for b in o) for o in out))";

fn here() -> String {
    let t = tch::Tensor::ones([1], (tch::Kind::Float, tch::Device::Cpu));
    [
        tch_scope::is_grad_enabled(),
        tch_scope::is_inference_mode_enabled(),
        t.is_inference(),
    ]
    .iter()
    .map(|&b| if b { '1' } else { '0' })
    .collect()
}

#[tch_scope::inference_mode(false)]
fn leaves_inference_mode() -> String {
    here()
}

#[test]
fn inference_mode_false_does_what_pytorch_does() {
    // Resolved first: python finds its venv from its own path, which must
    // not go through the `.libtorch` link.
    let torch = std::fs::canonicalize(concat!(env!("CARGO_MANIFEST_DIR"), "/../.libtorch"));
    let python = torch.map(|t| t.join("../../../../bin/python"));
    let Some(out) = python.as_ref().ok().and_then(|py| {
        std::process::Command::new(py)
            .args(["-c", ORACLE])
            .output()
            .ok()
    }) else {
        println!("skipped: no PyTorch python beside .libtorch ({python:?})");
        return;
    };
    assert!(
        out.status.success(),
        "{python:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let got = [
        scoped!(inference_mode => {
            let inner = scoped!(inference_mode(false) => here());
            format!("{inner} {}", here())
        }),
        scoped!(no_grad => leaves_inference_mode()),
        scoped!(inference_mode(enabled = false) => here()),
    ]
    .join(" ");
    assert_eq!(got, want, "tch-scope vs PyTorch");
    assert_eq!(state(), fresh());
}
