//! Enter + leave cost of each scope word, beside the raw tch equivalent
//! where tch has one. `make bench` runs this with PyTorch Python's numbers
//! (scripts/bench/) and writes docs/benchmarks.md.
//!
//! Ids are `<word>/<impl>`: `tch_scope` is `scoped!(word => …)`, `tch` the
//! raw tch call; scripts/bench/collect.py reads them by these names.

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use tch_scope::{NoGrad, Scope, scoped};

fn grad(c: &mut Criterion) {
    let mut g = c.benchmark_group("no_grad");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(no_grad => black_box(1)));
    });
    g.bench_function("tch_scope_attr", |b| {
        #[tch_scope::no_grad]
        #[inline(never)]
        fn f() -> i32 {
            black_box(1)
        }
        b.iter(f);
    });
    g.bench_function("tch_scope_enter", |b| {
        b.iter(|| black_box(NoGrad.enter().unwrap()));
    });
    g.bench_function("tch", |b| {
        b.iter(|| black_box(tch::no_grad_guard()));
    });
    g.finish();

    let mut g = c.benchmark_group("enable_grad");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(enable_grad => black_box(1)));
    });
    g.bench_function("tch", |b| {
        b.iter(|| tch::with_grad(|| black_box(1)));
    });
    g.finish();

    let mut g = c.benchmark_group("grad");
    let flag = black_box(false);
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(grad(flag) => black_box(1)));
    });
    g.finish();

    let mut g = c.benchmark_group("inference_mode");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(inference_mode => black_box(1)));
    });
    g.finish();
}

fn others(c: &mut Criterion) {
    let mut g = c.benchmark_group("device");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(device(cpu) => black_box(1)));
    });
    g.finish();

    // The target: timed enter + exit + record within 2x of the two clock
    // reads any timer needs.
    let mut g = c.benchmark_group("timed");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(timed => black_box(1)));
    });
    // With the timeline recording every span (the ring buffer wraps, so
    // the cost is steady), and with measuring switched off.
    g.bench_function("tch_scope_traced", |b| {
        tch_scope::trace::set_capacity(1 << 16).unwrap();
        tch_scope::trace::start();
        b.iter(|| scoped!(timed => black_box(1)));
        tch_scope::trace::stop();
        tch_scope::trace::set_capacity(1 << 20).unwrap();
    });
    g.bench_function("tch_scope_disabled", |b| {
        tch_scope::report::set_enabled(false);
        b.iter(|| scoped!(timed => black_box(1)));
        tch_scope::report::set_enabled(true);
    });
    // The loop alone, to read the switched-off scope's own cost.
    g.bench_function("empty", |b| {
        b.iter(|| black_box(1));
    });
    g.bench_function("instant_x2", |b| {
        b.iter(|| {
            let t = Instant::now();
            black_box(1);
            black_box(t.elapsed())
        });
    });
    g.finish();

    let mut g = c.benchmark_group("memory_scope");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(memory_scope => black_box(1)));
    });
    g.finish();

    let mut g = c.benchmark_group("seed");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(seed(7) => black_box(1)));
    });
    g.finish();

    let mut g = c.benchmark_group("fork_rng");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(fork_rng => black_box(1)));
    });
    g.finish();

    let mut g = c.benchmark_group("autocast");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(autocast(cpu, bf16) => black_box(1)));
    });
    g.finish();

    let mut g = c.benchmark_group("record");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(record("x") => black_box(1)));
    });
    g.finish();

    let mut g = c.benchmark_group("detect_anomaly");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(detect_anomaly => black_box(1)));
    });
    g.finish();

    let mut g = c.benchmark_group("deterministic");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(deterministic => black_box(1)));
    });
    g.finish();

    backends(c);
}

/// Precision and kernel choice, and `inference_mode(false)` inside an
/// outer `inference_mode`.
fn backends(c: &mut Criterion) {
    let mut g = c.benchmark_group("matmul_precision");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(matmul_precision("high") => black_box(1)));
    });
    g.finish();

    let mut g = c.benchmark_group("tf32");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(tf32(true) => black_box(1)));
    });
    g.finish();

    let mut g = c.benchmark_group("cudnn");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(cudnn(benchmark, deterministic) => black_box(1)));
    });
    g.finish();

    let mut g = c.benchmark_group("sdpa");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(sdpa(math) => black_box(1)));
    });
    g.finish();

    let mut g = c.benchmark_group("inference_mode_false");
    g.bench_function("tch_scope", |b| {
        scoped!(inference_mode => b.iter(|| scoped!(inference_mode(false) => black_box(1))));
    });
    g.finish();
}

/// `eval(model)`, `train(model)` and `no_grad, eval(model)` on the tests'
/// TorchScript model (5 modules: root, Linear, BatchNorm1d, Dropout,
/// Linear): save every module's mode, switch all, restore each.
fn modes(c: &mut Criterion) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/bn_dropout.pt");
    let model =
        tch::CModule::load(path).expect("tests/data/bn_dropout.pt (scripts/export_models.py)");
    let mut plain = tch::CModule::load(path).unwrap();

    let mut g = c.benchmark_group("eval");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(eval(model) => black_box(1)));
    });
    g.bench_function("tch", |b| {
        // Not a restore: tch can't read the mode, so this only sets it back
        // to training (what the model was).
        b.iter(|| {
            plain.set_eval();
            black_box(1);
            plain.set_train();
        });
    });
    g.finish();

    let mut g = c.benchmark_group("train");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(train(model) => black_box(1)));
    });
    g.bench_function("tch", |b| {
        b.iter(|| {
            plain.set_train();
            black_box(1);
            plain.set_train();
        });
    });
    g.finish();

    let mut g = c.benchmark_group("no_grad_eval");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(no_grad, eval(model) => black_box(1)));
    });
    g.bench_function("tch", |b| {
        b.iter(|| {
            let _g = tch::no_grad_guard();
            plain.set_eval();
            black_box(1);
            plain.set_train();
        });
    });
    g.finish();
}

/// `deadline`: enter + leave (its body runs under `catch_unwind`), and what
/// it adds to each operator inside it (a small op, where the per-operator
/// check shows most).
fn deadline(c: &mut Criterion) {
    use std::time::Duration;
    use tch::{Device, Kind, Tensor};
    use tch_scope::{Deadline, Scope};
    const LONG: Duration = Duration::from_secs(3600);
    let mut g = c.benchmark_group("deadline");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(deadline(LONG) => black_box(1)));
    });
    g.finish();

    let x = Tensor::ones([4], (Kind::Float, Device::Cpu));
    let mut g = c.benchmark_group("deadline_op");
    g.bench_function("tch", |b| b.iter(|| black_box(&x).relu()));
    let guard = Deadline::new(LONG).enter().expect("deadline");
    g.bench_function("tch_scope", |b| b.iter(|| black_box(&x).relu()));
    drop(guard);
    g.finish();
}

/// `no_grad, eval(model)` on a TorchScript model of 1000 modules
/// (scripts/bench/deep_model.py; `make bench` exports it to
/// target/bench/modules_1000.pt, or set TCH_SCOPE_DEEP_MODEL): the
/// per-module cost of saving, switching and restoring every flag.
fn deep_modes(c: &mut Criterion) {
    let path = std::env::var_os("TCH_SCOPE_DEEP_MODEL").map_or_else(
        || {
            std::path::PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../target/bench/modules_1000.pt"
            ))
        },
        std::path::PathBuf::from,
    );
    let Ok(model) = tch::CModule::load(&path) else {
        eprintln!(
            "no {} (scripts/bench/deep_model.py): skipping no_grad_eval_1000",
            path.display()
        );
        return;
    };
    let mut g = c.benchmark_group("no_grad_eval_1000");
    g.bench_function("tch_scope", |b| {
        b.iter(|| scoped!(no_grad, eval(model) => black_box(1)));
    });
    g.finish();
}

criterion_group!(benches, grad, others, modes, deadline, deep_modes);
criterion_main!(benches);
