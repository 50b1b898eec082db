//! GPU checks: run by `scripts/gpu-check.sh` on a machine with a CUDA
//! device (`cargo test --test gpu -- --ignored`). Ignored by default, since
//! CI has no GPU; each test fails, rather than passes vacuously, when CUDA
//! is missing. A process of its own: CUDA memory counters are per process.

use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

use tch::{Cuda, Device, Kind, Tensor};
use tch_scope::{SyncMode, current_cuda_device, current_device, last_memory_report, scoped};

/// The allocator counters are per device: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn need_cuda() {
    assert!(
        Cuda::is_available(),
        "CUDA is not available to this binary (libtorch_cuda not loaded, or no device)"
    );
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-check.sh"]
fn cuda_is_available_from_the_projects_binaries() {
    need_cuda();
    assert!(Cuda::device_count() >= 1);
    assert!(tch_scope::built_with_cuda());
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-check.sh"]
fn device_0_scope_sets_and_restores_the_current_device() {
    need_cuda();
    let before = (current_device(), current_cuda_device());
    let (inside, cuda, on) = scoped!(device(0) => {
        let t = Tensor::ones([4], (Kind::Float, current_device()));
        (current_device(), current_cuda_device(), t.device())
    });
    assert_eq!(inside, Device::Cuda(0));
    assert_eq!(cuda, Some(0));
    assert_eq!(on, Device::Cuda(0));
    assert_eq!((current_device(), current_cuda_device()), before);
    let last = Cuda::device_count() as usize;
    let err = tch_scope::try_scoped!(device(last) => ()).unwrap_err();
    assert!(err.to_string().contains(&format!("cuda:{last}")), "{err}");
}

/// Ten 8192² matmuls: tens of milliseconds of kernels, microseconds of
/// launches.
fn matmuls(a: &Tensor) {
    for _ in 0..10 {
        let _ = a.matmul(a);
    }
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-check.sh"]
fn timed_with_sync_covers_the_kernels_and_without_sync_only_the_launches() {
    need_cuda();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let a = Tensor::randn([8192, 8192], (Kind::Float, Device::Cuda(0)));
    matmuls(&a); // warm-up: cuBLAS handles, allocator
    Cuda::synchronize(0);

    // Reference: launch, then wait for the device.
    let t0 = Instant::now();
    matmuls(&a);
    Cuda::synchronize(0);
    let kernels = t0.elapsed();

    scoped!(device(0), timed("gpu::sync") => matmuls(&a)); // Auto: CUDA -> sync
    let with_sync = tch_scope::report().timing("gpu::sync").unwrap().max;

    let guard =
        tch_scope::Scope::enter(&mut tch_scope::Timed::new("gpu::nosync").sync(SyncMode::Never))
            .unwrap();
    matmuls(&a);
    drop(guard);
    Cuda::synchronize(0);
    let without = tch_scope::report().timing("gpu::nosync").unwrap().max;

    eprintln!("kernels {kernels:?}, timed(sync) {with_sync:?}, timed(no sync) {without:?}");
    assert!(
        with_sync.as_secs_f64() >= 0.8 * kernels.as_secs_f64(),
        "with sync the time covers the kernels: {with_sync:?} vs {kernels:?}"
    );
    assert!(
        without.as_secs_f64() < 0.25 * kernels.as_secs_f64(),
        "without sync only the launches: {without:?} vs {kernels:?}"
    );
}

/// What `torch.cuda.memory_allocated()` says for a 256 MiB float tensor
/// on a fresh device, from the bootstrap's PyTorch.
fn python_allocated_for_256_mib() -> u64 {
    // The venv holding the bootstrap's torch (or TCH_SCOPE_PYTHON).
    let python = std::env::var("TCH_SCOPE_PYTHON").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../.libtorch/../../../../bin/python"
        )
        .into()
    });
    let out = Command::new(&python)
        .args([
            "-c",
            "import torch; t = torch.ones(64 * 1024 * 1024, device='cuda:0'); \
             torch.cuda.synchronize(); print(torch.cuda.memory_allocated(0))",
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!("{python}: {e} (set TCH_SCOPE_PYTHON to a python with torch 2.13)")
        });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-check.sh"]
fn gpu_memory_scope_sees_exactly_what_pytorch_sees() {
    need_cuda();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let want = python_allocated_for_256_mib();
    let t = scoped!(gpu_memory_scope(name = "gpu::keep", device = 0) => {
        Tensor::ones([64 * 1024 * 1024], (Kind::Float, Device::Cuda(0)))
    });
    let r = last_memory_report().unwrap();
    assert_eq!(r.name, "gpu::keep");
    assert_eq!(r.delta(), want as i64, "{r:?}");
    assert_eq!(r.peak_growth(), want, "{r:?}");
    assert!(r.reserved.unwrap() >= want);
    drop(t);

    // Nested: the inner scope's peak is its own, the outer's covers both.
    scoped!(gpu_memory_scope(name = "gpu::outer", device = 0) => {
        let big = Tensor::ones([64 * 1024 * 1024], (Kind::Float, Device::Cuda(0)));
        drop(big);
        scoped!(gpu_memory_scope(name = "gpu::inner", device = 0) => {
            drop(Tensor::ones([16 * 1024 * 1024], (Kind::Float, Device::Cuda(0))));
        });
        let inner = last_memory_report().unwrap();
        assert_eq!(inner.peak_growth(), want / 4, "{inner:?}");
    });
    let outer = last_memory_report().unwrap();
    assert_eq!(outer.name, "gpu::outer");
    assert_eq!(outer.peak_growth(), want, "{outer:?}");
}

/// `distributed(backend = nccl)`: a group of one on cuda:0 (NCCL refuses
/// two ranks on one GPU), with every collective on a CUDA tensor.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-check.sh"]
fn nccl_collectives_on_cuda_tensors() {
    use tch_scope::dist::{self, ReduceOp};
    need_cuda();
    assert!(dist::Backend::Nccl.is_available(), "built without nccl");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let master = format!("127.0.0.1:{port}");
    let (sum, max, bcast) = scoped!(device(0), distributed(backend = nccl, rank = 0, world_size = 1, master = master) => {
        let group = dist::current().unwrap();
        let mut t = Tensor::arange(4, (Kind::Float, Device::Cuda(0)));
        group.all_reduce(&mut t, ReduceOp::Sum).unwrap();
        let mut m = Tensor::ones([3], (Kind::Float, Device::Cuda(0)));
        group.all_reduce(&mut m, ReduceOp::Max).unwrap();
        let mut b = Tensor::full([2], 7.0, (Kind::Float, Device::Cuda(0)));
        group.broadcast(&mut b, 0).unwrap();
        group.barrier().unwrap();
        (Vec::<f32>::try_from(t.to(Device::Cpu)).unwrap(),
         Vec::<f32>::try_from(m.to(Device::Cpu)).unwrap(),
         Vec::<f32>::try_from(b.to(Device::Cpu)).unwrap())
    });
    assert_eq!(sum, [0.0, 1.0, 2.0, 3.0]);
    assert_eq!(max, [1.0; 3]);
    assert_eq!(bcast, [7.0; 2]);
    assert!(
        dist::current().is_err(),
        "the group is gone after the scope"
    );
}
