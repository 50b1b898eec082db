//! `memory_scope` (process memory, tested here on real allocations) and
//! `gpu_memory_scope` (CUDA; here only its errors without a GPU — the GPU
//! path is covered by scripts/gpu-check.sh). A test binary of its own:
//! resident memory is process-wide.

#[allow(dead_code, reason = "each test binary uses a part of it")]
mod bundle;

use std::sync::Mutex;

use tch::{Device, Kind, Tensor};
use tch_scope::{MemoryReport, last_memory_report, memory_scope, scoped, try_scoped};

/// Resident memory is process-wide: these tests run one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const MIB: u64 = 1 << 20;

/// A tensor of `mib` MiB with every page touched.
fn tensor_mib(mib: i64) -> Tensor {
    Tensor::ones([mib * (1 << 18)], (Kind::Float, Device::Cpu))
}

fn near(got: u64, want: u64) -> bool {
    got.abs_diff(want) as f64 <= want as f64 * 0.10
}

#[test]
fn a_256_mib_tensor_is_seen_within_ten_percent() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let t = scoped!(memory_scope("memory::keep") => tensor_mib(256));
    let r = last_memory_report().unwrap();
    assert_eq!(r.name, "memory::keep");
    assert!(r.peak_is_scoped, "this kernel allows resetting VmHWM");
    assert!(near(r.peak_growth(), 256 * MIB), "{r:?}");
    assert!(near(r.delta() as u64, 256 * MIB), "kept: {r:?}");
    drop(t);

    scoped!(memory_scope("memory::drop") => drop(tensor_mib(256)));
    let r = last_memory_report().unwrap();
    assert!(near(r.peak_growth(), 256 * MIB), "{r:?}");
    assert!(r.delta().unsigned_abs() < 16 * MIB, "freed inside: {r:?}");
}

#[memory_scope("memory::attr")]
fn allocate_and_free(mib: i64) -> f64 {
    tensor_mib(mib).sum(Kind::Float).double_value(&[])
}

#[test]
fn nested_scopes_each_report_their_own_peak() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let outer: MemoryReport = {
        let ((), inner) = scoped!(memory_scope("memory::outer") => {
            // The outer scope's largest moment is inside the inner scope,
            // which resets the process peak on entry.
            scoped!(memory_scope("memory::inner_small") => drop(tensor_mib(64)));
            let small = last_memory_report().unwrap();
            assert_eq!(allocate_and_free(192), (192 * (1 << 18)) as f64);
            let big = last_memory_report().unwrap();
            assert!(near(small.peak_growth(), 64 * MIB), "{small:?}");
            ((), big)
        });
        assert_eq!(inner.name, "memory::attr");
        assert!(near(inner.peak_growth(), 192 * MIB), "{inner:?}");
        last_memory_report().unwrap()
    };
    assert_eq!(outer.name, "memory::outer");
    assert!(
        near(outer.peak_growth(), 192 * MIB),
        "outer keeps the inner peak: {outer:?}"
    );
    let r = tch_scope::report();
    assert_eq!(r.memory("memory::attr").unwrap().count, 1);
}

#[test]
fn gpu_memory_scope_without_cuda_is_an_error() {
    if tch_scope::cuda_device_count() > 0 {
        let why = "a CUDA device is here (tests/gpu.rs covers gpu_memory_scope on it)";
        bundle::skip("gpu_memory_scope_without_cuda_is_an_error", why);
        return;
    }
    let e = try_scoped!(gpu_memory_scope(device = 0) => ()).unwrap_err();
    assert_eq!(e.device(), Some(Device::Cuda(0)));
    assert_eq!(e.scope(), "gpu_memory_scope(device = 0)");
    assert!(e.reason().contains("CUDA is not available"), "{e}");
}
