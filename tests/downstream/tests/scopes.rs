//! tch-scope as a dependency named `ts`, checked through the functions of
//! `src/lib.rs` and blocks written here.

use std::io::ErrorKind;
use std::panic;
use std::path::Path;

use tch::{Device, Kind, Tensor};

#[test]
fn no_grad_on_a_function_returning_io_result() {
    let w = Tensor::ones([3, 2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let x = Tensor::ones([4, 3], (Kind::Float, Device::Cpu));
    let y = downstream::predict(&w, &x).unwrap();
    assert!(!y.requires_grad());
    assert_eq!(y.size(), [4, 2]);
    assert!((y.sum(Kind::Float).double_value(&[]) - 24.0).abs() < 1e-6);
    assert!(ts::is_grad_enabled());
    // The same product outside the scope builds a graph.
    assert!(x.matmul(&w).requires_grad());
}

#[test]
fn an_io_error_leaves_the_scope_and_restores_grad_mode() {
    let err = downstream::file_len(Path::new("/nonexistent/tch-scope")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(ts::is_grad_enabled());
    let len = downstream::file_len(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("Cargo.toml")
            .as_path(),
    )
    .unwrap();
    assert!(len > 0);
}

#[test]
fn no_grad_on_a_function_returning_a_string_error() {
    assert_eq!(downstream::checked_sum(&[1.0, 2.0, 3.5]), Ok(6.5));
    assert_eq!(
        downstream::checked_sum(&[1.0, -2.0]),
        Err("negative element -2".to_owned())
    );
    assert!(ts::is_grad_enabled());
}

#[test]
fn scope_list_with_timed_reports_under_the_function_path() {
    let x = Tensor::from_slice(&[1.0f32, 2.0]).set_requires_grad(true);
    for _ in 0..3 {
        let y = downstream::timed_step(&x);
        assert!(!y.requires_grad());
        assert_eq!(Vec::<f32>::try_from(&y).unwrap(), [2.0, 4.0]);
    }
    let report = ts::report();
    let t = report
        .timing("downstream::timed_step")
        .expect("a timing row");
    assert_eq!(t.count, 3);
    assert_eq!(t.failed + t.panicked, 0);
    assert!(t.min >= std::time::Duration::from_millis(1));
    assert!(format!("{report}").contains("downstream::timed_step"));
}

#[test]
fn device_zero_panics_with_the_scope_error_where_there_is_no_gpu() {
    let r = panic::catch_unwind(downstream::on_gpu);
    if ts::cuda_device_count() == 0 {
        let payload = r.expect_err("device(0) entered without a CUDA device");
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        assert!(msg.contains("device"), "panic message: {msg}");
    } else {
        assert_eq!(r.unwrap(), Ok(1));
    }
    assert!(ts::is_grad_enabled());
}

#[test]
fn timed_blocking_tasks_on_pool_threads_all_reach_the_report() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let sum: u32 = rt.block_on(async {
        let tasks: Vec<_> = (0..64)
            .map(|i| tokio::task::spawn_blocking(move || downstream::timed_work(i % 4)))
            .collect();
        let mut sum = 0;
        for t in tasks {
            sum += t.await.unwrap();
        }
        sum
    });
    // i % 4 in 0..4, sixteen times each: 16 × (0 + 1 + 3 + 6).
    assert_eq!(sum, 160);
    // Read while the pool's threads are alive, then after they have exited
    // (their totals move to the retired ones): the same 64 runs either way.
    let alive = ts::report().timing("downstream::timed_work").unwrap().count;
    drop(rt);
    let gone = ts::report().timing("downstream::timed_work").unwrap().count;
    assert_eq!((alive, gone), (64, 64));
}

#[test]
fn no_grad_async_fns_run_as_tasks_on_a_multi_threaded_runtime() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    rt.block_on(async {
        let mut scoped = Vec::new();
        let mut plain = Vec::new();
        for i in 0..64 {
            // tokio::spawn needs a Send future: the guards are !Send, the
            // scoped future is not.
            scoped.push(tokio::spawn(downstream::grad_after_await(i % 5)));
            plain.push(tokio::spawn(downstream::grad_outside()));
        }
        for h in scoped {
            assert!(!h.await.unwrap(), "grad mode on inside #[no_grad] async fn");
        }
        for h in plain {
            assert!(h.await.unwrap(), "grad mode leaked into another task");
        }
    });
}

#[test]
fn scoped_blocks_under_the_renamed_crate() {
    let x = Tensor::ones([2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let (grad, y) = ts::scoped!(no_grad, device(cpu) => (ts::is_grad_enabled(), &x + 1));
    assert!(!grad);
    assert!(!y.requires_grad());
    let t = ts::scoped!(inference_mode => {
        assert!(ts::is_inference_mode_enabled());
        Tensor::zeros([3], (Kind::Float, Device::Cpu))
    });
    assert!(t.is_inference());
    assert!(!ts::is_inference_mode_enabled());
    for training in [true, false] {
        assert_eq!(
            ts::scoped!(no_grad if !training => ts::is_grad_enabled()),
            training
        );
    }
    let r = ts::try_scoped!(device("cuda:7") => 1 + 1);
    if ts::cuda_device_count() < 8 {
        assert_eq!(r.unwrap_err().device(), Some(Device::Cuda(7)));
    } else {
        assert_eq!(r.unwrap(), 2);
    }
}

#[test]
fn precision_and_kernel_words_under_the_renamed_crate() {
    let q = Tensor::rand([1, 2, 4, 8], (Kind::Float, Device::Cpu));
    let out = downstream::attention(&q, &q, &q).unwrap();
    assert_eq!(out.size(), [1, 2, 4, 8]);
    assert_eq!(ts::sdpa_backends(), ts::SdpaBackend::ALL);
    assert!(!ts::cudnn_flags().benchmark);
    assert_eq!(ts::matmul_precision(), "highest");
    assert!(downstream::seeded_draw().equal(&downstream::seeded_draw()));
    // The same seed, 7, of three integer types draws the same; -1 is
    // u64::MAX, as in torch.manual_seed.
    let [a, b, c, minus_one] = downstream::seeded_by_step(7, 7, 7);
    assert!(a.equal(&b) && b.equal(&c));
    assert!(minus_one
        .equal(&ts::scoped!(seed(u64::MAX) => Tensor::rand([3], (Kind::Float, Device::Cpu)))));
}

/// Attributed async handlers spawned on a multi-thread runtime,
/// their report rows read back (durations span the awaits: each handler
/// sleeps 2 ms between two suspensions).
#[test]
fn scoped_async_handlers_spawn_and_report() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let results = rt.block_on(async {
        let tasks: Vec<_> = (0..32)
            .map(|i| tokio::spawn(downstream::handler(i % 4)))
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    assert!(
        results.iter().all(|&on| on),
        "inference mode off in a handler"
    );
    let row = ts::report().timing("downstream::handler").cloned().unwrap();
    assert_eq!(row.count, 32);
    assert!(row.min >= std::time::Duration::from_millis(2), "{row:?}");
    assert!(!ts::is_inference_mode_enabled());
}

/// Exact tensor bytes and a trace marker, from a user's crate.
#[test]
fn tensor_memory_and_trace_marks_under_the_renamed_crate() {
    let kept = ts::scoped!(tensor_memory("downstream::kept") => {
        Tensor::zeros([1024, 256], (Kind::Float, Device::Cpu))
    });
    let r = ts::last_memory_report().unwrap();
    assert_eq!(r.name, "downstream::kept");
    assert_eq!((r.delta(), r.peak_growth()), (1 << 20, 1 << 20), "{r:?}");
    drop(kept);
    ts::trace::start();
    ts::trace::mark("downstream::epoch");
    ts::trace::stop();
    let path = std::env::temp_dir().join(format!("downstream-mark-{}.json", std::process::id()));
    ts::trace::write_chrome(&path).unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(
        json.contains(r#""name":"downstream::epoch","cat":"mark","ph":"i""#),
        "{json}"
    );
}
