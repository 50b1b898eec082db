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

criterion_group!(benches, grad);
criterion_main!(benches);
