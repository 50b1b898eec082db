//! The per-thread context scopes: `autocast`, `profile` /
//! `record`, `checkpoint`, and the runtime `ScopeStack`. (The process-wide
//! ones — RNG, anomaly mode, deterministic algorithms — live in
//! `process_wide.rs`, a test binary of their own.)

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use tch::nn::{self, VarStore};
use tch::{Device, Kind, Tensor};
use tch_scope::{
    Autocast, AutocastDevice, NoGrad, Scope, ScopeError, ScopeStack, autocast_cache_enabled,
    autocast_dtype, is_grad_enabled, is_inference_mode_enabled, log_metric, metrics, scoped,
    try_scoped,
};

use crate::util::{fresh, state};

fn ones() -> Tensor {
    Tensor::ones([4, 4], (Kind::Float, Device::Cpu))
}

/// A fresh folder for one test's files.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tch-scope-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// ---- autocast ---------------------------------------------------------------

#[test]
fn autocast_cpu_bf16_casts_matmul_and_restores() {
    let a = ones();
    let inside = scoped!(autocast(cpu, bf16) => a.matmul(&a));
    assert_eq!(inside.kind(), Kind::BFloat16);
    assert_eq!(a.matmul(&a).kind(), Kind::Float);
    assert_eq!(autocast_dtype(AutocastDevice::Cpu), None);
}

#[test]
fn autocast_nested_restores_the_outer_dtype() {
    // Same as PyTorch: bf16 outside, f16 in the inner scope, bf16 again.
    let a = ones();
    let kinds = scoped!(autocast(cpu, bf16) => {
        let inner = scoped!(autocast(cpu, f16) => a.matmul(&a).kind());
        (inner, a.matmul(&a).kind(), autocast_dtype(AutocastDevice::Cpu))
    });
    assert_eq!(kinds, (Kind::Half, Kind::BFloat16, Some(Kind::BFloat16)));
    assert_eq!(a.matmul(&a).kind(), Kind::Float);
}

#[test]
fn autocast_defaults_to_bf16_on_cpu_and_can_be_turned_off_inside() {
    let a = ones();
    let off = Autocast::cpu(Kind::BFloat16).enabled(false);
    let (outer, inner) = scoped!(autocast(cpu) => {
        (a.matmul(&a).kind(), scoped!(with(off) => a.matmul(&a).kind()))
    });
    assert_eq!((outer, inner), (Kind::BFloat16, Kind::Float));
}

#[test]
fn autocast_restores_on_panic_and_is_per_thread() {
    let a = ones();
    let r = catch_unwind(AssertUnwindSafe(|| {
        scoped!(autocast(cpu, bf16) => {
            let other = std::thread::spawn(|| autocast_dtype(AutocastDevice::Cpu));
            assert_eq!(other.join().unwrap(), None, "a new thread starts without autocast");
            panic!("boom")
        })
    }));
    assert!(r.is_err());
    assert_eq!(autocast_dtype(AutocastDevice::Cpu), None);
    assert_eq!(a.matmul(&a).kind(), Kind::Float);
}

#[tch_scope::autocast(cpu, bf16)]
fn bf16_matmul(a: &Tensor) -> Kind {
    a.matmul(a).kind()
}

#[test]
fn autocast_attribute() {
    assert_eq!(bf16_matmul(&ones()), Kind::BFloat16);
    assert_eq!(autocast_dtype(AutocastDevice::Cpu), None);
}

#[test]
fn autocast_cuda_needs_cuda() {
    let r = try_scoped!(autocast(cuda, f16) => autocast_dtype(AutocastDevice::Cuda));
    if tch_scope::cuda_device_count() == 0 {
        let e = r.unwrap_err();
        assert_eq!(e.scope(), "autocast(cuda, f16)");
        assert!(e.reason().contains("CUDA is not available"), "{e}");
    } else {
        assert_eq!(r.unwrap(), Some(Kind::Half));
        let a = Tensor::ones([4, 4], (Kind::Float, Device::Cuda(0)));
        let k = scoped!(autocast(cuda, bf16) => a.matmul(&a).kind());
        assert_eq!(k, Kind::BFloat16);
    }
    assert_eq!(autocast_dtype(AutocastDevice::Cuda), None);
}

/// `torch.autocast(..., enabled=, cache_enabled=)` nested, as PyTorch 2.13
/// reports (`is_autocast_enabled("cpu")`, `is_autocast_cache_enabled()`,
/// the matmul's dtype) at each level:
/// `with autocast("cpu", torch.bfloat16, cache_enabled=False): A;
///   with autocast("cpu", torch.bfloat16, enabled=False): B;
///   with autocast("cpu", torch.float16): C` → A: 1 0 bf16, B: 0 0 f32
/// (the cache flag is inherited), C: 1 0 f16 (still inherited), after: 0 1 f32.
#[test]
fn autocast_enabled_and_cache_nest_as_in_pytorch() {
    let a = ones();
    let here = || {
        (
            autocast_dtype(AutocastDevice::Cpu).is_some(),
            autocast_cache_enabled(),
            a.matmul(&a).kind(),
        )
    };
    let levels = scoped!(autocast(cpu, bf16, cache = false) => {
        let outer = here();
        let off = scoped!(autocast(cpu, bf16, enabled = false) => here());
        let f16 = scoped!(autocast(cpu, f16) => here());
        [outer, off, f16]
    });
    assert_eq!(
        levels,
        [
            (true, false, Kind::BFloat16),
            (false, false, Kind::Float),
            (true, false, Kind::Half),
        ]
    );
    assert_eq!(here(), (false, true, Kind::Float));
    let on = true;
    let k = scoped!(autocast(cpu, enabled = on, cache = true) => a.matmul(&a).kind());
    assert_eq!(k, Kind::BFloat16);
}

#[test]
fn autocast_rejects_other_kinds() {
    let e = Autocast::cpu(Kind::Double).enter().unwrap_err();
    assert!(e.reason().contains("Kind::Half or Kind::BFloat16"), "{e}");
}

// ---- profile / record ---------------------------------------------------------

#[test]
fn profile_writes_a_chrome_trace_with_ranges_and_ops() {
    let dir = temp_dir("profile");
    let path = dir.join("trace.json");
    let a = ones();
    scoped!(profile(&path) => {
        let _ = scoped!(record("my_range") => a.matmul(&a));
        // A second profiler on the same thread is refused, cleanly.
        let nested = try_scoped!(profile(dir.join("nested.json")) => ());
        assert!(nested.is_err());
    });
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let names: Vec<&str> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(names.contains(&"my_range"), "{names:?}");
    assert!(names.contains(&"aten::matmul"), "{names:?}");
    // Only the trace is left: the temporary file was renamed.
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(files, ["trace.json"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn record_without_profiler_is_harmless() {
    let y = scoped!(record("alone"), record("twice") => ones().sum(Kind::Float));
    assert_eq!(y.double_value(&[]), 16.0);
    // `record` never fails: a NUL byte in the name is kept as `\0`.
    let before = tch_scope::exit_errors_reported();
    assert_eq!(scoped!(record("a\0b") => 3), 3);
    assert_eq!(tch_scope::exit_errors_reported(), before);
}

// ---- checkpoint -----------------------------------------------------------------

fn model(vs: &VarStore) -> nn::Linear {
    nn::linear(vs.root(), 3, 2, Default::default())
}

fn fill(vs: &VarStore, v: f64) {
    let _g = NoGrad.enter().unwrap();
    for (_, mut t) in vs.variables() {
        let _ = t.fill_(v);
    }
}

fn values(vs: &VarStore) -> Vec<f64> {
    let mut vars: Vec<_> = vs.variables().into_iter().collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    vars.iter()
        .flat_map(|(_, t)| Vec::<f64>::try_from(t.flatten(0, -1).to_kind(Kind::Double)).unwrap())
        .collect()
}

#[test]
fn checkpoint_saves_on_exit_and_resumes_weights_and_metrics() {
    let dir = temp_dir("ckpt-resume");
    for ext in ["ot", "safetensors"] {
        let path = dir.join(format!("model.{ext}"));
        let vs = VarStore::new(Device::Cpu);
        let _m = model(&vs);
        scoped!(checkpoint(vs, &path) => {
            fill(&vs, 0.5);
            assert!(log_metric("loss", 1.0));
            assert!(log_metric("loss", 0.5));
        });
        assert!(!log_metric("loss", 0.0), "no checkpoint open any more");

        // A plain VarStore file.
        let mut plain = VarStore::new(Device::Cpu);
        let _m = model(&plain);
        plain.load(&path).unwrap();
        assert!(values(&plain).iter().all(|&v| v == 0.5));

        // `resume` restores weights and the metric log, then appends.
        let vs2 = VarStore::new(Device::Cpu);
        let _m = model(&vs2);
        let log = scoped!(checkpoint(vs2, &path, resume) => {
            assert!(values(&vs2).iter().all(|&v| v == 0.5));
            log_metric("loss", 0.25);
            metrics().unwrap()
        });
        assert_eq!(log.get("loss"), [1.0, 0.5, 0.25]);

        // Without `resume`, the file is overwritten, metrics start afresh.
        let vs3 = VarStore::new(Device::Cpu);
        let _m = model(&vs3);
        scoped!(checkpoint(vs3, &path) => assert_eq!(metrics().unwrap().get("loss"), [] as [f64; 0]));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn checkpoint_saves_on_panic_and_on_error() {
    let dir = temp_dir("ckpt-exits");
    let path = dir.join("model.ot");
    let vs = VarStore::new(Device::Cpu);
    let _m = model(&vs);
    let r = catch_unwind(AssertUnwindSafe(|| {
        scoped!(checkpoint(vs, &path) => {
            fill(&vs, 2.0);
            panic!("diverged")
        })
    }));
    assert!(r.is_err());
    let check = |want: f64| {
        let mut back = VarStore::new(Device::Cpu);
        let _m = model(&back);
        back.load(&path).unwrap();
        assert!(values(&back).iter().all(|&v| v == want));
    };
    check(2.0);

    #[tch_scope::checkpoint(vs, path)]
    fn step(vs: &VarStore, path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
        fill(vs, 3.0);
        log_metric("step", 1.0);
        Err("bad batch")?;
        unreachable!()
    }
    assert_eq!(step(&vs, &path).unwrap_err().to_string(), "bad batch");
    check(3.0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn checkpoint_resume_rejects_a_corrupt_file_and_ignores_a_missing_one() {
    let dir = temp_dir("ckpt-corrupt");
    let path = dir.join("model.ot");
    let vs = VarStore::new(Device::Cpu);
    let _m = model(&vs);
    let fresh_run = try_scoped!(checkpoint(vs, &path, resume) => metrics().unwrap());
    assert_eq!(fresh_run.unwrap(), Default::default());
    std::fs::write(&path, b"not a checkpoint").unwrap();
    let e = try_scoped!(checkpoint(vs, &path, resume) => ()).unwrap_err();
    assert!(e.scope().starts_with("checkpoint("), "{e}");
    // The failed entry saved nothing: the file is as it was.
    assert_eq!(std::fs::read(&path).unwrap(), b"not a checkpoint");
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- ScopeStack -------------------------------------------------------------------

thread_local!(static LOG: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) });

struct Named(&'static str);
struct NamedGuard(&'static str);
impl Scope for Named {
    type Guard = NamedGuard;
    type Error = ScopeError;
    fn enter(&mut self) -> Result<NamedGuard, ScopeError> {
        LOG.with_borrow_mut(|l| l.push(format!("enter {}", self.0)));
        Ok(NamedGuard(self.0))
    }
}
impl Drop for NamedGuard {
    fn drop(&mut self) {
        LOG.with_borrow_mut(|l| l.push(format!("leave {}", self.0)));
    }
}

#[test]
fn scope_stack_leaves_in_reverse_order() {
    LOG.with_borrow_mut(Vec::clear);
    {
        let mut stack = ScopeStack::new();
        for name in ["a", "b", "c"] {
            stack.enter(Named(name)).unwrap();
        }
        stack.callback(|| LOG.with_borrow_mut(|l| l.push("callback".into())));
        assert_eq!(stack.len(), 4);
    }
    let log = LOG.with_borrow(Clone::clone);
    assert_eq!(
        log,
        [
            "enter a", "enter b", "enter c", "callback", "leave c", "leave b", "leave a"
        ]
    );
}

#[test]
fn scope_stack_restores_on_panic_and_keeps_state_on_a_failed_enter() {
    let r = catch_unwind(|| {
        let mut stack = ScopeStack::new();
        stack.enter(NoGrad).unwrap();
        stack.enter(tch_scope::InferenceMode).unwrap();
        assert!(is_inference_mode_enabled());
        panic!("boom");
    });
    assert!(r.is_err());
    assert_eq!(state(), fresh());

    let mut stack = ScopeStack::new();
    stack.enter(NoGrad).unwrap();
    let e = stack
        .enter(tch_scope::OnDevice::new(Device::Cuda(99)))
        .unwrap_err();
    assert_eq!(e.device(), Some(Device::Cuda(99)));
    assert_eq!(stack.len(), 1);
    assert!(!is_grad_enabled(), "the scopes entered before stay open");
    assert!(stack.pop());
    assert!(is_grad_enabled());
}

#[test]
fn scope_stack_holds_borrowing_scopes() {
    let vs = VarStore::new(Device::Cpu);
    let model = tch_scope::WithMode::new(nn::linear(vs.root(), 2, 2, Default::default()));
    let eval = true;
    let mut stack = ScopeStack::new();
    if eval {
        stack.enter(tch_scope::Mode::eval(&model)).unwrap();
    }
    assert!(!model.is_training());
    drop(stack);
    assert!(model.is_training());
}

#[test]
fn an_iterator_in_a_scope_runs_each_next_inside_it() {
    use tch_scope::{NoGrad, ScopeIterExt};
    // A generator of tensors, like token-by-token decoding: each step is
    // made under `no_grad`, and the caller's code between steps is not.
    let w = crate::util::leaf();
    let steps = (0..3).map(|i| &w * f64::from(i)).in_scope(NoGrad);
    let mut between = Vec::new();
    let mut made = Vec::new();
    for t in steps {
        between.push(tch_scope::is_grad_enabled());
        made.push(t.requires_grad());
    }
    assert_eq!(made, [false, false, false]);
    assert_eq!(between, [true, true, true]);
    // A scope that can't be entered ends each `next()` with its error.
    if tch_scope::cuda_device_count() == 0 {
        let mut it = [1, 2]
            .into_iter()
            .in_scope(tch_scope::OnDevice::new(tch::Device::Cuda(0)));
        assert_eq!(it.next().unwrap().unwrap_err().scope(), "device(0)");
    }
    assert_eq!(crate::util::state(), crate::util::fresh());
}
