//! The `distributed` scope with real multi-process Gloo groups: each rank is
//! this test binary re-executed on `distributed::worker` (and, for interop,
//! PyTorch's own python). Only 127.0.0.1, free ports, every child reaped.

mod procs;

use std::time::{Duration, Instant};

use tch::{Device, Kind, Tensor, nn, nn::Module, nn::OptimizerConfig};
use tch_scope::dist::{self, DistError, ReduceOp};
use tch_scope::{Scope, ScopeError, scoped, try_scoped};

use procs::{Outcome, free_port, python, run_all};

const DEADLINE: Duration = Duration::from_secs(90);

/// Whether this build has Gloo (scripts/bootstrap-gloo.sh found gloo's
/// headers); without it the tests say so and skip.
fn gloo() -> bool {
    let on = dist::Backend::Gloo.is_available();
    if !on {
        println!("skipped: tch-scope was built without gloo's headers (scripts/bootstrap-gloo.sh)");
    }
    on
}

fn env_usize(name: &str) -> usize {
    std::env::var(name).unwrap().parse().unwrap()
}

fn f64s(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(&t.to_kind(Kind::Double).reshape([-1])).unwrap()
}

/// The entry point of a child rank; a no-op in the normal test run.
#[test]
fn worker() {
    let Ok(scenario) = std::env::var(procs::WORKER_ENV) else {
        crate::bundle::skip("distributed::worker", "the entry point of child ranks");
        return;
    };
    match scenario.as_str() {
        "collectives" => collectives_from_env(),
        "collectives_explicit" => collectives_explicit().unwrap(),
        "dies" => dies(false),
        "stalls" => dies(true),
        "interop" => interop(),
        "ddp" => ddp_worker(),
        other => panic!("unknown scenario {other}"),
    }
}

/// Every collective, under `distributed(from_env)` (torchrun's variables).
fn collectives_from_env() {
    scoped!(distributed(from_env, timeout = Duration::from_secs(20)) => {
        check_collectives(&dist::current().unwrap());
    });
    // Left: the group is gone with its scope.
    assert!(dist::current().is_err());
    println!("DONE ok");
}

/// The same with explicit arguments, as an attribute on a `Result` fn.
#[tch_scope::distributed(
    backend = gloo,
    rank = env_usize("RANK"),
    world_size = env_usize("WORLD_SIZE"),
    master = format!("127.0.0.1:{}", env_usize("MASTER_PORT")),
    timeout = Duration::from_secs(20),
)]
fn collectives_explicit() -> Result<(), Box<dyn std::error::Error>> {
    check_collectives(&dist::current()?);
    println!("DONE ok");
    Ok(())
}

fn check_collectives(g: &dist::Group) {
    let (r, n) = (g.rank(), g.world_size());
    assert_eq!((r, n), (env_usize("RANK"), env_usize("WORLD_SIZE")));
    let rf = r as f64;
    let nf = n as f64;

    let mut t = Tensor::from_slice(&[rf + 1.0, 2.0 * rf]);
    g.all_reduce(&mut t, ReduceOp::Sum).unwrap();
    assert_eq!(f64s(&t), [nf * (nf + 1.0) / 2.0, nf * (nf - 1.0)]);

    let mut t = Tensor::from_slice(&[rf, -rf]);
    g.all_reduce(&mut t, ReduceOp::Max).unwrap();
    assert_eq!(f64s(&t), [nf - 1.0, 0.0]);

    let mut t = Tensor::from_slice(&[rf as f32]);
    dist::all_reduce(&mut t, ReduceOp::Mean).unwrap();
    assert!((f64s(&t)[0] - (nf - 1.0) / 2.0).abs() < 1e-6);

    // Integers can't be averaged: an error, before any communication.
    let mut i = Tensor::from_slice(&[1i64]);
    assert!(g.all_reduce(&mut i, ReduceOp::Mean).is_err());

    // A non-contiguous tensor is reduced through a copy and written back.
    let base = Tensor::from_slice(&[rf, 10.0 + rf, 20.0 + rf, 30.0 + rf]).reshape([2, 2]);
    let mut tr = base.tr();
    assert!(!tr.is_contiguous());
    g.all_reduce(&mut tr, ReduceOp::Sum).unwrap();
    let s = nf * (nf - 1.0) / 2.0;
    assert_eq!(f64s(&tr), [s, s + 20.0 * nf, s + 10.0 * nf, s + 30.0 * nf]);

    let root = n - 1;
    let mut b = Tensor::from_slice(&[(r * 100 + 7) as i64, -1]);
    dist::broadcast(&mut b, root).unwrap();
    assert_eq!(
        Vec::<i64>::try_from(&b).unwrap(),
        [(root * 100 + 7) as i64, -1]
    );
    assert!(g.broadcast(&mut b, n).is_err());

    let all = dist::all_gather(&Tensor::from_slice(&[r as i32, (r * r) as i32])).unwrap();
    let got: Vec<Vec<i32>> = all.iter().map(|t| Vec::try_from(t).unwrap()).collect();
    let want: Vec<Vec<i32>> = (0..n).map(|k| vec![k as i32, (k * k) as i32]).collect();
    assert_eq!(got, want);

    // Rank 0 arrives late; nobody leaves the barrier before it does.
    let start = Instant::now();
    if r == 0 {
        std::thread::sleep(Duration::from_millis(300));
    }
    dist::barrier().unwrap();
    assert!(start.elapsed() >= Duration::from_millis(250));
}

/// The last rank dies (or stalls past the timeout) after one all_reduce;
/// the others must get an error, not hang, from the next collective within
/// the 3 s timeout.
fn dies(stall: bool) {
    let port = env_usize("MASTER_PORT");
    let (r, n) = (env_usize("RANK"), env_usize("WORLD_SIZE"));
    let master = format!("127.0.0.1:{port}");
    let result: Result<Result<(), DistError>, ScopeError> = try_scoped!(
    distributed(rank = r, world_size = n, master = master, timeout = Duration::from_secs(3)) => {
        let mut t = Tensor::from_slice(&[1.0f32]);
        dist::all_reduce(&mut t, ReduceOp::Sum).unwrap();
        if r == n - 1 && !stall {
            std::process::exit(3);
        }
        if r == n - 1 {
            std::thread::sleep(Duration::from_secs(5));
        }
        let start = Instant::now();
        let mut t = Tensor::ones([1 << 16], (Kind::Float, Device::Cpu));
        let e = dist::all_reduce(&mut t, ReduceOp::Sum).and_then(|()| dist::barrier());
        println!("ELAPSED_MS {}", start.elapsed().as_millis());
        e
    });
    let err = result
        .expect("joined")
        .expect_err("a collective with a dead rank must fail");
    assert_eq!(err.op(), "all_reduce");
    println!("ERROR {err}");
}

/// The collectives of tests/dist_peer.py, printed the way Python prints them.
fn interop() {
    scoped!(distributed(from_env, timeout = Duration::from_secs(30)) => {
        let g = dist::current().unwrap();
        let (r, n) = (g.rank(), g.world_size());
        let mut t = Tensor::from_slice(&[(r + 1) as f32, 10.0 * (r + 1) as f32]);
        g.all_reduce(&mut t, ReduceOp::Sum).unwrap();
        println!("SUM {:?}", f64s(&t));
        let mut m = Tensor::from_slice(&[r as f64, -(r as f64)]);
        g.all_reduce(&mut m, ReduceOp::Max).unwrap();
        println!("MAX {:?}", f64s(&m));
        let mut b = Tensor::from_slice(&[(r * 100 + 7) as i64]);
        g.broadcast(&mut b, n - 1).unwrap();
        println!("BCAST {:?}", Vec::<i64>::try_from(&b).unwrap());
        let mine = Tensor::from_slice(&[r as f32, (r * r) as f32]);
        let all: Vec<Vec<f64>> = g.all_gather(&mine).unwrap().iter().map(f64s).collect();
        println!("GATHER {all:?}");
        g.barrier().unwrap();
    });
    println!("DONE");
}

/// 64 samples of y = 3·x0 − 2·x1 + 0.5, x from a fixed formula.
fn ddp_data() -> (Tensor, Tensor) {
    let x: Vec<f32> = (0..128).map(|i| ((i as f32) * 0.37).sin()).collect();
    let x = Tensor::from_slice(&x).reshape([64, 2]);
    let w = Tensor::from_slice(&[3.0f32, -2.0]).reshape([2, 1]);
    let y = x.matmul(&w) + 0.5;
    (x, y)
}

/// Trains a linear model for 40 SGD steps on `x, y`, averaging gradients
/// over `group` if there is one; returns weight and bias.
fn ddp_train(x: &Tensor, y: &Tensor, group: Option<&dist::Group>) -> Vec<f64> {
    let vs = nn::VarStore::new(Device::Cpu);
    let cfg = nn::LinearConfig {
        ws_init: nn::Init::Const(0.1),
        bs_init: Some(nn::Init::Const(0.0)),
        bias: true,
    };
    let model = nn::linear(vs.root(), 2, 1, cfg);
    let mut opt = nn::Sgd::default().build(&vs, 0.1).unwrap();
    for _ in 0..40 {
        opt.zero_grad();
        let loss = model.forward(x).mse_loss(y, tch::Reduction::Mean);
        loss.backward();
        if let Some(g) = group {
            g.average_gradients(&vs).unwrap();
        }
        opt.step();
    }
    let mut out = f64s(&model.ws);
    out.extend(f64s(model.bs.as_ref().unwrap()));
    out
}

fn ddp_worker() {
    scoped!(distributed(from_env) => {
        let g = dist::current().unwrap();
        let (x, y) = ddp_data();
        let shard = 64 / g.world_size() as i64;
        let lo = g.rank() as i64 * shard;
        let w = ddp_train(&x.narrow(0, lo, shard), &y.narrow(0, lo, shard), Some(&g));
        println!("WEIGHTS {w:?}");
    });
}

fn group(scenario: &str, n: usize) -> Vec<Outcome> {
    let port = free_port();
    let out = run_all(
        (0..n)
            .map(|r| procs::worker(scenario, r, n, port))
            .collect(),
        DEADLINE,
    );
    for (r, o) in out.iter().enumerate() {
        assert!(o.ok(), "rank {r} of {scenario}:\n{o}");
    }
    out
}

#[test]
fn collectives_in_groups_of_2_and_4() {
    if !gloo() {
        return;
    }
    for o in group("collectives", 2) {
        assert_eq!(o.line("DONE"), "ok");
    }
    for o in group("collectives_explicit", 4) {
        assert_eq!(o.line("DONE"), "ok");
    }
}

#[test]
fn a_dead_rank_is_an_error_for_the_others_within_the_timeout() {
    if !gloo() {
        return;
    }
    let n = 3;
    let port = free_port();
    let out = run_all(
        (0..n).map(|r| procs::worker("dies", r, n, port)).collect(),
        DEADLINE,
    );
    assert_eq!(
        out[n - 1].status.and_then(|s| s.code()),
        Some(3),
        "{}",
        out[n - 1]
    );
    check_others_failed(&out[..n - 1]);
}

#[test]
fn a_stalled_rank_is_an_error_for_the_others_at_the_timeout() {
    if !gloo() {
        return;
    }
    let n = 2;
    let port = free_port();
    let out = run_all(
        (0..n)
            .map(|r| procs::worker("stalls", r, n, port))
            .collect(),
        DEADLINE,
    );
    // The staller, back after 5 s, finds its peer gone: an error too.
    check_others_failed(&out);
    let ms: u64 = out[0].line("ELAPSED_MS").parse().unwrap();
    assert!(
        ms >= 2_500,
        "failed after {ms} ms, before the 3 s timeout:\n{}",
        out[0]
    );
}

fn check_others_failed(out: &[Outcome]) {
    for o in out {
        assert!(o.ok(), "{o}");
        let ms: u64 = o.line("ELAPSED_MS").parse().unwrap();
        assert!(ms < 3_000 + 3_000, "took {ms} ms:\n{o}");
        assert!(o.line("ERROR").contains("all_reduce failed on rank"), "{o}");
    }
}

#[test]
fn a_rank_that_never_comes_is_a_scope_error_within_the_timeout() {
    if !gloo() {
        return;
    }
    let master = format!("127.0.0.1:{}", free_port());
    let start = Instant::now();
    let r = try_scoped!(
        distributed(rank = 0, world_size = 2, master = master, timeout = Duration::from_secs(2)) => ()
    );
    let e = r.unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(
        e.scope()
            .starts_with("distributed(backend = gloo, rank = 0"),
        "{e}"
    );
    assert!(dist::current().is_err());
}

#[test]
fn the_group_is_destroyed_on_panic_and_on_exit() {
    if !gloo() {
        return;
    }
    let master = format!("127.0.0.1:{}", free_port());
    let kept = std::panic::catch_unwind(|| {
        scoped!(distributed(rank = 0, world_size = 1, master = master) => {
            let g = dist::current().unwrap();
            assert!(g.is_open());
            std::panic::panic_any(g)
        })
    })
    .unwrap_err()
    .downcast::<dist::Group>()
    .unwrap();
    assert!(!kept.is_open());
    assert!(dist::current().is_err());
    let e = kept.barrier().unwrap_err();
    assert!(e.reason().contains("has exited"), "{e}");
    // The port is free again: a new group on it works.
    let mut scope = dist::Distributed::gloo(0, 1, format!("127.0.0.1:{}", free_port()));
    let g = scope.enter().unwrap();
    g.barrier().unwrap();
}

#[test]
fn bad_arguments_are_scope_errors() {
    let e = try_scoped!(distributed(rank = 2, world_size = 2, master = "127.0.0.1:1") => ())
        .unwrap_err();
    assert!(
        e.reason().contains("rank 2 is not below world_size 2"),
        "{e}"
    );
    let master = String::from("no-port");
    let e = try_scoped!(distributed(rank = 0, world_size = 1, master = master) => ()).unwrap_err();
    assert!(e.reason().contains("is not \"host:port\""), "{e}");
    let e =
        try_scoped!(distributed(backend = nccl, rank = 0, world_size = 1, master = "h:1") => ())
            .unwrap_err();
    // NCCL is built with a CUDA libtorch (as the bootstrap's) and the CUDA
    // headers; it still needs a CUDA device to join.
    if !tch_scope::dist::Backend::Nccl.is_available() {
        assert!(e.reason().contains("nccl backend is not built"), "{e}");
    } else if tch_scope::cuda_device_count() == 0 {
        assert!(e.reason().contains("needs a CUDA device"), "{e}");
    }
}

/// NCCL is built with the bootstrap's CUDA wheel once `make` has completed
/// its CUDA headers, and never without CUDA.
#[test]
fn nccl_is_built_with_a_cuda_libtorch_and_its_headers() {
    let nccl = tch_scope::dist::Backend::Nccl.is_available();
    if !tch_scope::built_with_cuda() {
        assert!(!nccl, "nccl without a CUDA libtorch");
        return;
    }
    if crate::bundle::bundle().is_some() {
        // Away from the build tree: gpu-bundle.sh checked the headers there.
        assert!(nccl, "the GPU bundle was built without nccl");
        return;
    }
    let nvidia = concat!(env!("CARGO_MANIFEST_DIR"), "/../.libtorch/../nvidia");
    let headers = std::fs::read_dir(nvidia)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.path().join("include/crt/host_config.h").exists());
    assert_eq!(nccl, headers, "nccl built iff the CUDA headers are there");
}

#[test]
fn nested_distributed_scopes_are_refused() {
    if !gloo() {
        return;
    }
    let (a, b) = (free_port(), free_port());
    let inner = scoped!(distributed(rank = 0, world_size = 1, master = format!("127.0.0.1:{a}")) => {
        try_scoped!(distributed(rank = 0, world_size = 1, master = format!("127.0.0.1:{b}")) => ())
    });
    assert!(inner.unwrap_err().reason().contains("already active"));
}

#[test]
fn async_bodies_join_once_and_keep_the_group_across_polls() {
    if !gloo() {
        return;
    }
    let master = format!("127.0.0.1:{}", free_port());
    let ranks = crate::util::block_on(async {
        scoped!(distributed(rank = 0, world_size = 1, master = master) => {
            let before = dist::current().unwrap();
            crate::util::YieldOnce::default().await;
            let after = dist::current().unwrap();
            assert!(before.is_open());
            after.barrier().unwrap();
            (before.rank(), after.world_size())
        })
    });
    assert_eq!(ranks, (0, 1));
    assert!(dist::current().is_err());
}

#[test]
fn ddp_over_2_and_4_ranks_matches_one_process_on_all_the_data() {
    if !gloo() {
        return;
    }
    let (x, y) = ddp_data();
    let single = ddp_train(&x, &y, None);
    for n in [2, 4] {
        let out = group("ddp", n);
        let weights: Vec<Vec<f64>> = out
            .iter()
            .map(|o| {
                let line = o.line("WEIGHTS");
                line.trim_matches(['[', ']'])
                    .split(", ")
                    .map(|v| v.parse().unwrap())
                    .collect()
            })
            .collect();
        for w in &weights {
            assert_eq!(w, &weights[0], "ranks disagree");
        }
        for (a, b) in weights[0].iter().zip(&single) {
            assert!((a - b).abs() < 1e-5, "{:?} vs {single:?}", weights[0]);
        }
    }
}

#[test]
fn a_python_rank_and_rust_ranks_form_one_group() {
    if !gloo() {
        return;
    }
    let Some(py) = python() else {
        crate::bundle::skip(
            "distributed::a_python_rank_and_rust_ranks_form_one_group",
            "no PyTorch python (the bootstrap venv, or TCH_SCOPE_PYTHON)",
        );
        return;
    };
    let script = crate::bundle::tests_dir().join("dist_peer.py");
    // Python serves the store (rank 0) in one group; Rust does in the other.
    for layout in [["py", "rs", "rs"], ["rs", "py", "rs"]] {
        let port = free_port();
        let n = layout.len();
        let cmds = layout
            .iter()
            .enumerate()
            .map(|(r, who)| match *who {
                "py" => {
                    let mut c = std::process::Command::new(&py);
                    c.arg(&script).envs(procs::rank_env(r, n, port));
                    c
                }
                _ => procs::worker("interop", r, n, port),
            })
            .collect();
        let out = run_all(cmds, DEADLINE);
        for o in &out {
            assert!(o.ok(), "{layout:?}:\n{o}");
        }
        for tag in ["SUM", "MAX", "BCAST", "GATHER"] {
            let lines: Vec<String> = out.iter().map(|o| o.line(tag)).collect();
            assert!(lines.iter().all(|l| *l == lines[0]), "{tag}: {lines:?}");
        }
        assert_eq!(out[0].line("SUM"), "[6.0, 60.0]");
        assert_eq!(out[0].line("MAX"), "[2.0, -0.0]"); // max(-0.0, -1.0, -2.0)
        assert_eq!(out[0].line("BCAST"), "[207]");
        assert_eq!(
            out[0].line("GATHER"),
            "[[0.0, 0.0], [1.0, 1.0], [2.0, 4.0]]"
        );
    }
}

#[test]
fn a_rust_binary_runs_under_torchrun() {
    if !gloo() {
        return;
    }
    let Some(py) = python() else {
        crate::bundle::skip(
            "distributed::a_rust_binary_runs_under_torchrun",
            "no PyTorch python (the bootstrap venv, or TCH_SCOPE_PYTHON)",
        );
        return;
    };
    let torchrun = py.with_file_name("torchrun");
    let port = free_port();
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(torchrun);
    cmd.args([
        "--nnodes=1",
        "--nproc-per-node=2",
        "--master-addr=127.0.0.1",
        &format!("--master-port={port}"),
        "--no-python",
    ])
    .arg(exe)
    .args([
        "distributed::worker",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(procs::WORKER_ENV, "collectives")
    .env("GLOO_SOCKET_IFNAME", "lo");
    let out = run_all(vec![cmd], DEADLINE).remove(0);
    assert!(out.ok(), "{out}");
    assert_eq!(out.lines("DONE").len(), 2, "{out}");
}
