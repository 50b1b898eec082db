//! GPU checks: run from the GPU bundle by `scripts/gpu-run.sh` (`make
//! gpu-bundle`), or by `scripts/gpu-check.sh` on a GPU machine with Rust
//! (`cargo test --test gpu -- --ignored`). Ignored by default, since CI has
//! no GPU. Without a CUDA device each test says `GPU-SKIP <test>: no CUDA
//! device` and returns (so the summary lists it as skipped, not passed);
//! with `TCH_SCOPE_EXPECT_CUDA=1` (the runners set it when PyTorch sees a
//! GPU) it fails instead. Measurements go out as `GPU-FIGURE k=v …` lines.
//! A process of its own: CUDA memory counters are per process.

#[allow(dead_code, reason = "each test binary uses a part of it")]
mod bundle;
#[allow(
    dead_code,
    reason = "the distributed tests' child processes; here two NCCL ranks"
)]
#[path = "distributed/procs.rs"]
mod procs;

use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tch::{Cuda, Device, Kind, Tensor};
use tch_scope::{
    SyncMode, current_cuda_device, current_device, last_memory_report, scoped, try_scoped,
};

use bundle::{cuda_or_skip, figure};

/// The allocator counters are per device: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh or scripts/gpu-check.sh"]
fn cuda_is_available_from_the_projects_binaries() {
    if !cuda_or_skip("cuda_is_available_from_the_projects_binaries") {
        return;
    }
    assert!(Cuda::device_count() >= 1);
    assert!(tch_scope::built_with_cuda());
}

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh or scripts/gpu-check.sh"]
fn device_0_scope_sets_and_restores_the_current_device() {
    if !cuda_or_skip("device_0_scope_sets_and_restores_the_current_device") {
        return;
    }
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
#[ignore = "needs a CUDA device: scripts/gpu-run.sh or scripts/gpu-check.sh"]
fn timed_with_sync_covers_the_kernels_and_without_sync_only_the_launches() {
    if !cuda_or_skip("timed_with_sync_covers_the_kernels_and_without_sync_only_the_launches") {
        return;
    }
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
    figure(&[
        ("timed_matmuls", "10x8192^2_f32".into()),
        ("kernels_ms", ms(kernels)),
        ("timed_sync_ms", ms(with_sync)),
        ("timed_nosync_ms", ms(without)),
    ]);
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
    // gpu-run.sh sets TCH_SCOPE_PYTHON to the machine's python3.
    // Resolved first: python finds its venv from its own path, which must
    // not go through the `.libtorch` link.
    let python = std::env::var("TCH_SCOPE_PYTHON").unwrap_or_else(|_| {
        let torch = concat!(env!("CARGO_MANIFEST_DIR"), "/../.libtorch");
        let torch = std::fs::canonicalize(torch).unwrap_or_else(|_| torch.into());
        torch.join("../../../../bin/python").display().to_string()
    });
    let out = Command::new(&python)
        .args([
            "-c",
            "import torch; t = torch.ones(64 * 1024 * 1024, device='cuda:0'); \
             torch.cuda.synchronize(); print(torch.cuda.memory_allocated(0))",
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!("{python}: {e} (set TCH_SCOPE_PYTHON to a python with this libtorch's torch)")
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
#[ignore = "needs a CUDA device: scripts/gpu-run.sh or scripts/gpu-check.sh"]
fn gpu_memory_scope_sees_exactly_what_pytorch_sees() {
    if !cuda_or_skip("gpu_memory_scope_sees_exactly_what_pytorch_sees") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let want = python_allocated_for_256_mib();
    let t = scoped!(gpu_memory_scope(name = "gpu::keep", device = 0) => {
        Tensor::ones([64 * 1024 * 1024], (Kind::Float, Device::Cuda(0)))
    });
    let r = last_memory_report().unwrap();
    figure(&[
        ("gpu_memory_scope", "ones(64Mi)_f32".into()),
        ("scope_delta_bytes", r.delta().to_string()),
        ("scope_peak_growth_bytes", r.peak_growth().to_string()),
        ("scope_reserved_bytes", format!("{:?}", r.reserved)),
        ("torch_memory_allocated_bytes", want.to_string()),
    ]);
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

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh or scripts/gpu-check.sh"]
fn tensor_memory_counts_cuda_tensors_exactly() {
    if !cuda_or_skip("tensor_memory_counts_cuda_tensors_exactly") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const MIB: i64 = 1 << 20;
    let cuda = (Kind::Float, Device::Cuda(0));
    // The caching allocator reports each block it hands out and takes back
    // (a 1 MiB tensor is a 1 MiB block: sizes round to 512 bytes).
    let kept = scoped!(tensor_memory("gpu::tensor_kept") => Tensor::zeros([1024, 256], cuda));
    let r = last_memory_report().unwrap();
    assert_eq!((r.delta(), r.device.as_str()), (MIB, "cuda:0"), "{r:?}");
    scoped!(tensor_memory("gpu::tensor_dropped") => {
        drop(Tensor::zeros([1024, 256], cuda));
        scoped!(tensor_memory("gpu::tensor_inner") => {
            drop(Tensor::zeros([1024, 512], cuda));
        });
    });
    let outer = last_memory_report().unwrap();
    assert_eq!(outer.name, "gpu::tensor_dropped");
    assert_eq!(
        (outer.delta(), outer.peak_growth()),
        (0, 2 * MIB as u64),
        "{outer:?}"
    );
    assert_eq!(
        (outer.allocated, outer.freed),
        (Some(3 * MIB as u64), Some(3 * MIB as u64))
    );
    figure(&[
        ("tensor_memory", "zeros(1024x256)_f32_cuda".into()),
        ("kept_delta_bytes", r.delta().to_string()),
        ("dropped_peak_growth_bytes", outer.peak_growth().to_string()),
    ]);
    drop(kept);
}

/// `distributed(backend = nccl)`, a group of one on cuda:0: every
/// collective on a CUDA tensor, and the time of a 256 MiB all_reduce.

#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh or scripts/gpu-check.sh"]
fn nccl_collectives_on_cuda_tensors() {
    use tch_scope::dist::{self, ReduceOp};
    if !cuda_or_skip("nccl_collectives_on_cuda_tensors") {
        return;
    }
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
        let mut big = Tensor::ones([64 * 1024 * 1024], (Kind::Float, Device::Cuda(0)));
        group.all_reduce(&mut big, ReduceOp::Sum).unwrap(); // warm-up
        Cuda::synchronize(0);
        let t0 = Instant::now();
        group.all_reduce(&mut big, ReduceOp::Sum).unwrap();
        Cuda::synchronize(0);
        figure(&[
            ("nccl_world1", "ok".into()),
            ("all_reduce_256MiB_ms", ms(t0.elapsed())),
        ]);
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

const RANK_ENV: &str = "TCH_SCOPE_GPU_NCCL_RANK";
const MASTER_ENV: &str = "TCH_SCOPE_GPU_NCCL_MASTER";

/// A child rank of `nccl_two_ranks_on_one_gpu`; says `NCCL-SUM …` or
/// `NCCL-ERROR …` (and exits 3).
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh or scripts/gpu-check.sh"]
fn nccl_rank() {
    use tch_scope::dist::{self, ReduceOp};
    let Ok(rank) = std::env::var(RANK_ENV) else {
        bundle::skip(
            "nccl_rank",
            "the entry point of nccl_two_ranks_on_one_gpu's ranks",
        );
        return;
    };
    let rank: usize = rank.parse().unwrap();
    let master = std::env::var(MASTER_ENV).unwrap();
    let timeout = Duration::from_secs(30);
    let r = try_scoped!(device(0), distributed(backend = nccl, rank = rank, world_size = 2, master = master, timeout = timeout) => {
        let group = dist::current().unwrap();
        let mut t = Tensor::full([2], (rank + 1) as f64, (Kind::Float, Device::Cuda(0)));
        group
            .all_reduce(&mut t, ReduceOp::Sum)
            .and_then(|()| group.barrier())
            .map(|()| Vec::<f32>::try_from(t.to(Device::Cpu)).unwrap())
            .map_err(|e| e.to_string())
    });
    match r.map_err(|e| e.to_string()).and_then(|r| r) {
        Ok(v) => println!("NCCL-SUM {v:?}"),
        Err(e) => {
            println!("NCCL-ERROR {}", e.replace('\n', " "));
            std::process::exit(3);
        }
    }
}

/// Two NCCL ranks (two processes) on the one GPU, if NCCL allows it: it
/// refuses duplicate GPUs in one communicator ("Duplicate GPU detected",
/// ncclInvalidUsage), which is reported as a figure, not a failure.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh or scripts/gpu-check.sh"]
fn nccl_two_ranks_on_one_gpu() {
    if !cuda_or_skip("nccl_two_ranks_on_one_gpu") {
        return;
    }
    assert!(
        tch_scope::dist::Backend::Nccl.is_available(),
        "built without nccl"
    );
    let master = format!("127.0.0.1:{}", procs::free_port());
    let cmds = (0..2)
        .map(|rank| {
            let mut c = Command::new(std::env::current_exe().unwrap());
            c.args([
                "nccl_rank",
                "--exact",
                "--include-ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(RANK_ENV, rank.to_string())
            .env(MASTER_ENV, &master)
            // NCCL's own reason (a duplicate GPU, say) on stderr.
            .env("NCCL_DEBUG", "WARN");
            c
        })
        .collect();
    let out = procs::run_all(cmds, Duration::from_secs(90));
    let slowest = out.iter().map(|o| o.elapsed).max().unwrap();
    if out.iter().all(procs::Outcome::ok) {
        for o in &out {
            assert_eq!(o.line("NCCL-SUM"), "[3.0, 3.0]", "{o}");
        }
        figure(&[("nccl_world2_one_gpu", "ok".into()), ("ms", ms(slowest))]);
        return;
    }
    let all: String = out.iter().map(|o| format!("{o}\n")).collect();
    let refused = ["Duplicate GPU", "invalid usage", "ncclInvalidUsage"]
        .iter()
        .any(|w| all.contains(w));
    assert!(
        refused,
        "two NCCL ranks on one GPU failed otherwise:\n{all}"
    );
    let why = out
        .iter()
        .flat_map(|o| o.lines("NCCL-ERROR"))
        .next()
        .unwrap_or_else(|| "see stderr".into());
    figure(&[
        ("nccl_world2_one_gpu", "refused".into()),
        (
            "reason",
            format!("{:?}", why.chars().take(160).collect::<String>()),
        ),
    ]);
}

// ---- streams, events, timed(events) ------------------------------------------------

/// `stream(s)` makes `s` current on its device (and the device current),
/// every exit puts both back; work queued inside runs on `s`, and another
/// stream that `wait_stream`s for it sees the result.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh or scripts/gpu-check.sh"]
fn stream_scope_sets_and_restores_the_current_stream() {
    if !cuda_or_skip("stream_scope_sets_and_restores_the_current_stream") {
        return;
    }
    use tch_scope::cuda::Stream;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = Stream::current(0).unwrap();
    assert_eq!(before, Stream::default_stream(0).unwrap());
    let side = Stream::from_pool(0, false).unwrap();
    let high = Stream::from_pool(0, true).unwrap();
    assert_ne!(side, before);
    assert_ne!(high, side);
    assert_eq!(side.device(), Device::Cuda(0));
    let a = Tensor::ones([2048, 2048], (Kind::Float, Device::Cuda(0)));
    let (inside, dev, y) = scoped!(stream(side) => {
        (Stream::current(0).unwrap(), current_cuda_device(), a.matmul(&a))
    });
    assert_eq!(inside, side);
    assert_eq!(dev, Some(0));
    assert_eq!(Stream::current(0).unwrap(), before, "restored at the end");
    before.wait_stream(&side).unwrap();
    let sum = y.sum(Kind::Double).double_value(&[]);
    assert!((sum - 2048.0 * 2048.0 * 2048.0).abs() < 1.0, "{sum}");
    // Every exit: `?`, panic; nested.
    let r: Result<(), String> = (|| {
        scoped!(stream(&side) => {
            scoped!(stream(high) => assert_eq!(Stream::current(0).unwrap(), high));
            assert_eq!(Stream::current(0).unwrap(), side);
            Err("early".to_owned())?;
        });
        Ok(())
    })();
    assert!(r.is_err());
    let p = std::panic::catch_unwind(|| scoped!(stream(side) => panic!("inside")));
    assert!(p.is_err());
    assert_eq!(Stream::current(0).unwrap(), before);
    side.synchronize().unwrap();
    assert!(side.query().unwrap());
}

/// Two events time the kernels between them; `elapsed` waits for the end
/// event only. Against a synchronised wall clock around the same work.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh or scripts/gpu-check.sh"]
fn events_time_the_kernels_between_them() {
    if !cuda_or_skip("events_time_the_kernels_between_them") {
        return;
    }
    use tch_scope::cuda::{Event, Stream};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let a = Tensor::ones([8192, 8192], (Kind::Float, Device::Cuda(0)));
    matmuls(&a);
    let s = Stream::current(0).unwrap();
    s.synchronize().unwrap();
    let (mut start, mut end) = (Event::new().unwrap(), Event::new().unwrap());
    let wall = Instant::now();
    start.record(&s).unwrap();
    matmuls(&a);
    end.record(&s).unwrap();
    let launched = wall.elapsed();
    let gpu = start.elapsed(&end).unwrap();
    let synced = wall.elapsed();
    assert!(end.query().unwrap());
    assert!(gpu > launched, "events {gpu:?} vs launches {launched:?}");
    assert!(gpu <= synced, "events {gpu:?} vs wall {synced:?}");
    figure(&[
        ("test", "events".into()),
        ("launch_ms", ms(launched)),
        ("event_ms", ms(gpu)),
        ("wall_ms", ms(synced)),
    ]);
}

/// `timed(events)`: the run is read when the report is, and it covers the
/// kernels (like `sync`), with no synchronise at exit (like no sync).
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh or scripts/gpu-check.sh"]
fn timed_events_reads_the_kernel_time_when_the_report_is_read() {
    if !cuda_or_skip("timed_events_reads_the_kernel_time_when_the_report_is_read") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let a = Tensor::ones([8192, 8192], (Kind::Float, Device::Cuda(0)));
    matmuls(&a);
    tch::Cuda::synchronize(0);
    let exit = Instant::now();
    scoped!(device(0), timed("gpu::events", events) => matmuls(&a));
    let at_exit = exit.elapsed();
    scoped!(device(0), timed("gpu::sync", sync) => matmuls(&a));
    let r = tch_scope::report();
    let events = r.timing("gpu::events").cloned().unwrap();
    let synced = r.timing("gpu::sync").cloned().unwrap();
    assert_eq!(events.count, 1);
    assert!(
        events.total > at_exit,
        "{:?} vs exit after {at_exit:?}",
        events.total
    );
    let ratio = events.total.as_secs_f64() / synced.total.as_secs_f64();
    assert!(
        (0.5..1.5).contains(&ratio),
        "events {events:?} vs sync {synced:?}"
    );
    figure(&[
        ("test", "timed_events".into()),
        ("exit_ms", ms(at_exit)),
        ("events_ms", ms(events.total)),
        ("sync_ms", ms(synced.total)),
    ]);
}

// ---- precision and kernel choice --------------------------------------------------

/// `tf32(true)` / `matmul_precision("high")` let cuBLAS use TF32: a float32
/// matmul moves away from the float64 result by far more than with
/// `tf32(false)`.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh or scripts/gpu-check.sh"]
fn tf32_changes_what_a_cuda_matmul_computes() {
    if !cuda_or_skip("tf32_changes_what_a_cuda_matmul_computes") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    tch::manual_seed(0);
    let a = Tensor::rand([1024, 1024], (Kind::Float, Device::Cuda(0)));
    let exact = a.to_kind(Kind::Double).matmul(&a.to_kind(Kind::Double));
    let err = |t: Tensor| {
        (t.to_kind(Kind::Double) - &exact)
            .abs()
            .max()
            .double_value(&[])
    };
    let ieee = scoped!(tf32(false) => err(a.matmul(&a)));
    let tf32 = scoped!(tf32(true) => err(a.matmul(&a)));
    let high = scoped!(matmul_precision("high") => err(a.matmul(&a)));
    assert!(tf32 > 10.0 * ieee, "tf32 {tf32} vs ieee {ieee}");
    assert!(high > 10.0 * ieee, "high {high} vs ieee {ieee}");
    assert!(!tch_scope::allow_tf32());
    figure(&[
        ("test", "tf32".into()),
        ("ieee_max_err", format!("{ieee:.3e}")),
        ("tf32_max_err", format!("{tf32:.3e}")),
    ]);
}

/// Each CUDA attention backend alone gives the math backend's output (f16,
/// within f16 rounding), and `cudnn(benchmark)` leaves a convolution's
/// result as it was.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh or scripts/gpu-check.sh"]
fn sdpa_backends_agree_on_cuda() {
    if !cuda_or_skip("sdpa_backends_agree_on_cuda") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    tch::manual_seed(0);
    let r = || Tensor::rand([2, 8, 128, 64], (Kind::Half, Device::Cuda(0)));
    let (q, k, v) = (r(), r(), r());
    let attend = || {
        Tensor::f_scaled_dot_product_attention(&q, &k, &v, None::<&Tensor>, 0.0, true, None, false)
    };
    let math = scoped!(sdpa(math) => attend()).unwrap();
    let diff = |t: &Tensor| (t - &math).abs().max().double_value(&[]);
    let flash = scoped!(sdpa(flash) => attend()).unwrap();
    let efficient = scoped!(sdpa(mem_efficient) => attend()).unwrap();
    assert!(diff(&flash) < 1e-2, "flash {}", diff(&flash));
    assert!(
        diff(&efficient) < 1e-2,
        "mem_efficient {}",
        diff(&efficient)
    );
    let x = Tensor::rand([4, 16, 64, 64], (Kind::Float, Device::Cuda(0)));
    let w = Tensor::rand([32, 16, 3, 3], (Kind::Float, Device::Cuda(0)));
    let conv = || x.conv2d(&w, None::<&Tensor>, [1, 1], [1, 1], [1, 1], 1);
    let plain = scoped!(cudnn(allow_tf32 = false) => conv());
    let tuned = scoped!(cudnn(benchmark, deterministic, allow_tf32 = false) => conv());
    assert!((&plain - &tuned).abs().max().double_value(&[]) < 1e-3);
    assert!(!tch_scope::cudnn_flags().benchmark);
    figure(&[
        ("test", "sdpa".into()),
        ("flash_max_diff", format!("{:.3e}", diff(&flash))),
        (
            "mem_efficient_max_diff",
            format!("{:.3e}", diff(&efficient)),
        ),
    ]);
}

/// `recompute` on CUDA: dropout draws from the CUDA generator, which the
/// backward's re-run replays, so the gradients are bitwise equal to the
/// plain chain's; the generator goes on afterwards as after the plain one.
#[test]
#[ignore = "needs a CUDA device: scripts/gpu-run.sh or scripts/gpu-check.sh"]
fn recompute_replays_the_cuda_generator_bitwise() {
    if !cuda_or_skip("recompute_replays_the_cuda_generator_bitwise") {
        return;
    }
    let dev = tch::Device::Cuda(0);
    tch::manual_seed(0);
    let w =
        (tch::Tensor::randn([256, 256], (tch::Kind::Float, dev)) / 16.0).set_requires_grad(true);
    let x = tch::Tensor::randn([64, 256], (tch::Kind::Float, dev)).set_requires_grad(true);
    let block = |h: &tch::Tensor, w: &tch::Tensor| h.matmul(w).relu().dropout(0.5, true).matmul(w);
    let run = |recomputed: bool| {
        tch::manual_seed(7);
        let (xx, ww) = (
            x.detach().set_requires_grad(true),
            w.detach().set_requires_grad(true),
        );
        let y = if recomputed {
            let wc = ww.shallow_clone();
            tch_scope::autograd::recompute(&[&xx], move |xs| vec![block(xs[0], &wc)]).remove(0)
        } else {
            block(&xx, &ww)
        };
        y.square().sum(tch::Kind::Float).backward();
        let after = tch::Tensor::rand([4], (tch::Kind::Float, dev));
        (xx.grad(), ww.grad(), after)
    };
    let (gx, gw, after) = run(false);
    let (rx, rw, rafter) = run(true);
    assert!(gx.equal(&rx), "input gradient");
    assert!(gw.equal(&rw), "weight gradient");
    assert!(
        after.equal(&rafter),
        "the CUDA generator goes on as after the plain chain"
    );
    figure(&[("recompute_cuda_bitwise", "true".to_owned())]);
}
