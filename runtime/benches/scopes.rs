//! Enter + leave cost of each scope word, beside the raw tch equivalent.
//! `make bench`; the README's table comes from here.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use tch_scope::{NoGrad, Scope, scoped};

fn grad(c: &mut Criterion) {
    let mut g = c.benchmark_group("no_grad");
    g.bench_function("tch::no_grad_guard", |b| {
        b.iter(|| black_box(tch::no_grad_guard()));
    });
    g.bench_function("tch_scope scoped!", |b| {
        b.iter(|| scoped!(no_grad => black_box(1)));
    });
    g.bench_function("tch_scope #[no_grad] fn", |b| {
        #[tch_scope::no_grad]
        #[inline(never)]
        fn f() -> i32 {
            black_box(1)
        }
        b.iter(f);
    });
    g.bench_function("tch_scope NoGrad.enter()", |b| {
        b.iter(|| black_box(NoGrad.enter().unwrap()));
    });
    g.finish();

    let mut g = c.benchmark_group("inference_mode");
    g.bench_function("tch_scope scoped!", |b| {
        b.iter(|| scoped!(inference_mode => black_box(1)));
    });
    g.finish();

    let mut g = c.benchmark_group("device");
    g.bench_function("tch_scope scoped!(device(cpu))", |b| {
        b.iter(|| scoped!(device(cpu) => black_box(1)));
    });
    g.finish();
}

/// `no_grad, eval(model)` on the tests' TorchScript model (5 modules:
/// Linear, BatchNorm1d, Dropout, Linear): save every module's mode, switch
/// all to eval, restore each.
fn eval(c: &mut Criterion) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/bn_dropout.pt");
    let model =
        tch::CModule::load(path).expect("tests/data/bn_dropout.pt (scripts/export_models.py)");
    let mut g = c.benchmark_group("eval");
    g.bench_function("tch_scope scoped!(no_grad, eval(model))", |b| {
        b.iter(|| scoped!(no_grad, eval(model) => black_box(1)));
    });
    let mut plain = tch::CModule::load(path).unwrap();
    g.bench_function("tch no_grad_guard + set_eval + set_train", |b| {
        // Not a restore: tch can't read the mode, so this only sets it back
        // to training (what the model was).
        b.iter(|| {
            let _g = tch::no_grad_guard();
            plain.set_eval();
            black_box(1);
            plain.set_train();
        });
    });
    g.finish();
}

criterion_group!(benches, grad, eval);
criterion_main!(benches);
