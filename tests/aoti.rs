//! AOTInductor packages `tch_scope::aoti::Package` against
//! PyTorch's own runner, served to threads by `Inference`, every bad
//! package and input, and which scopes reach inside a run (the table in
//! docs/words.md).
//!
//! The packages are exported by scripts/export_pt2.py with the bootstrap's
//! PyTorch (a C++ compiler, ~30-60 s a model) into
//! target/tmp/aoti/<torch version>-<hash of the script>/, once per machine:
//! the first test to need them runs the script when that folder is missing.
//! Without a PyTorch python (`TCH_SCOPE_PYTHON`, or the venv beside
//! `.libtorch`) the tests say so and pass without checking.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tch::{Device, Kind, Tensor};
use tch_scope::aoti::Package;
use tch_scope::{Deadline, Inference, Scope, last_memory_report, report, scoped, try_scoped};

// ---- the packages ---------------------------------------------------------

mod pt2;
use pt2::packages;

macro_rules! need_packages {
    () => {
        match packages() {
            Some(dir) => dir,
            None => return,
        }
    };
}

/// What the export script recorded for one package.
struct Expected {
    input: Tensor,
    runner_bits: Vec<i32>,
    eager_bits: Vec<i32>,
    output_shape: Vec<i64>,
}

fn json(dir: &Path, name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ints<T: TryFrom<i64>>(v: &serde_json::Value) -> Vec<T>
where
    T::Error: std::fmt::Debug,
{
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| T::try_from(x.as_i64().unwrap()).unwrap())
        .collect()
}

fn from_bits(bits: &[i32], shape: &[i64]) -> Tensor {
    let floats: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b as u32)).collect();
    Tensor::from_slice(&floats).reshape(shape)
}

fn bits_of(t: &Tensor) -> Vec<i32> {
    let t = t.contiguous().view([-1]);
    let v: Vec<f32> = Vec::<f32>::try_from(&t).unwrap();
    v.into_iter().map(|f| f.to_bits() as i32).collect()
}

fn mlp(dir: &Path) -> Expected {
    let j = json(dir, "mlp");
    let shape: Vec<i64> = ints(&j["input_shape"]);
    Expected {
        input: from_bits(&ints::<i32>(&j["input_bits"]), &shape),
        runner_bits: ints(&j["runner_bits"]),
        eager_bits: ints(&j["eager_bits"]),
        output_shape: ints(&j["output_shape"]),
    }
}

fn wide_input(dir: &Path) -> Tensor {
    let shape: Vec<i64> = ints(&json(dir, "wide")["input_shape"]);
    Tensor::ones(shape.as_slice(), (Kind::Float, Device::Cpu))
}

/// The one package every test of a process shares (loading costs ~10 ms).
fn mlp_package(dir: &Path) -> &'static Package {
    static PKG: OnceLock<Package> = OnceLock::new();
    PKG.get_or_init(|| Package::load(dir.join("mlp.pt2")).unwrap())
}

// ---- outputs ----------------------------------------------------------------

#[test]
fn outputs_are_bitwise_pythons_runner_and_close_to_eager() {
    let dir = need_packages!();
    let e = mlp(dir);
    let pkg = mlp_package(dir);
    assert_eq!((pkg.num_inputs(), pkg.num_outputs()), (1, 1));
    assert_eq!(pkg.device_key(), "cpu");
    let out = pkg.run(&[&e.input]).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].size(), e.output_shape);
    assert_eq!(out[0].kind(), Kind::Float);
    assert_eq!(
        bits_of(&out[0]),
        e.runner_bits,
        "not bitwise PyTorch's AOTI runner"
    );
    let eager = from_bits(&e.eager_bits, &e.output_shape);
    let diff = (&out[0] - &eager).abs().max().double_value(&[]);
    assert!(diff <= 1e-5, "max |aoti - eager| = {diff}");
    // A second run, same answer.
    assert_eq!(bits_of(&pkg.run(&[&e.input]).unwrap()[0]), e.runner_bits);
}

#[test]
fn runners_default_to_the_cpus_and_can_be_set() {
    let dir = need_packages!();
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(mlp_package(dir).runners(), cpus);
    let one = Package::options()
        .runners(0)
        .load(dir.join("mlp.pt2"))
        .unwrap();
    assert_eq!(one.runners(), 1);
    let three = Package::options()
        .runners(3)
        .load(dir.join("mlp.pt2"))
        .unwrap();
    assert_eq!(three.runners(), 3);
    let e = mlp(dir);
    assert_eq!(bits_of(&three.run(&[&e.input]).unwrap()[0]), e.runner_bits);
}

/// 4 threads through one `Inference<Package>`, with 1 runner (callers take
/// turns) and with the default: every answer bitwise the runner's.
#[test]
fn four_threads_share_one_served_package() {
    let dir = need_packages!();
    for runners in [1, 4] {
        let pkg = Package::options()
            .runners(runners)
            .load(dir.join("mlp.pt2"))
            .unwrap();
        let served = Arc::new(Inference::new(pkg).unwrap());
        // Tensors are not `Sync`: each thread reads its own copy.
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (served, e) = (Arc::clone(&served), mlp(dir));
                std::thread::spawn(move || {
                    for _ in 0..25 {
                        let out = served
                            .run(|m| {
                                assert!(tch_scope::is_inference_mode_enabled());
                                m.run(&[&e.input])
                            })
                            .unwrap();
                        assert!(out[0].is_inference());
                        assert_eq!(bits_of(&out[0]), e.runner_bits);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let pkg = Arc::into_inner(served).unwrap().into_inner();
        assert_eq!(pkg.runners(), runners);
    }
}

// ---- bad packages and inputs ----------------------------------------------

fn load_err(path: impl AsRef<Path>) -> String {
    Package::load(path).unwrap_err().to_string()
}

#[test]
fn a_missing_file_is_named() {
    let e = load_err("/no/such/model.pt2");
    assert_eq!(e, "cannot load `/no/such/model.pt2`: no such file");
}

#[test]
fn a_file_that_is_not_a_package_is_refused() {
    // A TorchScript archive: a zip, but no AOTInductor model in it.
    let ts = concat!(env!("CARGO_MANIFEST_DIR"), "/data/bn_dropout.pt");
    let e = load_err(ts);
    assert!(
        e.contains("bn_dropout.pt`: not an AOTInductor package"),
        "{e}"
    );
    assert!(
        e.lines().count() == 1,
        "one line, not the archive's listing: {e}"
    );

    // Not a zip at all.
    let junk = Path::new(env!("CARGO_TARGET_TMPDIR")).join("aoti-junk.pt2");
    std::fs::write(&junk, b"this is not a package").unwrap();
    let e = load_err(&junk);
    assert!(
        e.contains("aoti-junk.pt2`: not an AOTInductor package"),
        "{e}"
    );

    // An empty file.
    let empty = Path::new(env!("CARGO_TARGET_TMPDIR")).join("aoti-empty.pt2");
    std::fs::write(&empty, b"").unwrap();
    let e = load_err(&empty);
    assert!(
        e.contains("aoti-empty.pt2`: not an AOTInductor package"),
        "{e}"
    );
}

#[test]
fn a_model_name_the_package_lacks_is_refused() {
    let dir = need_packages!();
    let e = Package::options()
        .model_name("other")
        .load(dir.join("mlp.pt2"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("none with a model named \"other\""), "{e}");
}

/// mlp.pt2 with AOTI_DEVICE_KEY = "cuda": refused where there is no CUDA
/// device, before libtorch's loader tries.
#[test]
fn a_package_for_a_device_this_process_lacks_is_refused() {
    let dir = need_packages!();
    let r = Package::load(dir.join("cuda_key.pt2"));
    if tch_scope::cuda_device_count() == 0 {
        let e = r.unwrap_err().to_string();
        assert!(
            e.ends_with("cuda_key.pt2`: the package was compiled for cuda, and this process has no cuda device"),
            "{e}"
        );
    }
}

// Wrong inputs, what each input must be, a dynamic batch from 1, and
// stderr: in inputs.rs.
#[path = "aoti/inputs.rs"]
mod inputs;

#[path = "aoti/errors.rs"]
mod errors;

// ---- scopes inside a run --------------------------------------------------

/// A deadline that has passed refuses the run at its entry: the run's own
/// operator `tch_scope::aoti_run`, and the `deadline` scope ends with its
/// error as for any operator.
#[test]
fn a_passed_deadline_refuses_the_run_at_entry() {
    let dir = need_packages!();
    let pkg = mlp_package(dir);
    let e = mlp(dir);

    let r = try_scoped!(deadline(Duration::ZERO) => pkg.run(&[&e.input]));
    let err = r.unwrap_err();
    assert!(err.is_ended(), "{err}");
    assert!(
        err.to_string()
            .starts_with("deadline of 0 us exceeded after"),
        "{err}"
    );
    assert!(
        err.to_string().ends_with(" at tch_scope::aoti_run"),
        "{err}"
    );

    // Called directly inside an open deadline: the run's own error is the
    // deadline's.
    let g = Deadline::new(Duration::ZERO).enter().unwrap();
    let err = pkg.run(&[&e.input]).unwrap_err();
    assert!(err.is_ended(), "{err}");
    assert!(
        err.to_string().ends_with(" at tch_scope::aoti_run"),
        "{err}"
    );
    assert!(g.passed().is_some());
    drop(g);

    // A deadline not yet passed: runs as always, many times (checked
    // between runs: each run's entry).
    let ok = try_scoped!(deadline(Duration::from_secs(60)) => {
        (0..3).filter(|_| pkg.run(&[&e.input]).is_ok()).count()
    });
    assert_eq!(ok, Ok(3));
    assert_eq!(bits_of(&pkg.run(&[&e.input]).unwrap()[0]), e.runner_bits);
}

/// A deadline that passes after the run has begun does not stop it: on
/// CPU the package's code reaches no dispatcher (its buffers come from
/// `at::detail::empty_strided_cpu`, its extern kernels are
/// `at::cpu::*_out`, its fused loops are plain C++), so the run goes to
/// its end and the next operator is refused. Made likely with one runner:
/// the run enters (deadline not yet passed), then waits for the runner
/// another thread holds, and the deadline passes meanwhile.
#[test]
fn a_deadline_passing_midway_does_not_stop_a_cpu_run() {
    let dir = need_packages!();
    let pkg = Arc::new(
        Package::options()
            .runners(1)
            .load(dir.join("wide.pt2"))
            .unwrap(),
    );
    let x = wide_input(dir);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = {
        let (pkg, x, stop) = (Arc::clone(&pkg), x.shallow_clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                pkg.run(&[&x]).unwrap();
            }
        })
    };
    let (mut midway, mut at_entry) = (0, 0);
    for _ in 0..200 {
        let until = Instant::now() + Duration::from_micros(50);
        let r = try_scoped!(deadline(until = until) => {
            let out = pkg.run(&[&x]);
            (out, Instant::now() > until)
        });
        match r {
            // The deadline passed while the run was under way (waiting for
            // the runner, or computing), and it ran to its end.
            Ok((Ok(out), true)) => {
                assert_eq!(out[0].size(), x.size());
                midway += 1;
            }
            Ok((Ok(_), false)) => {}
            Ok((Err(e), _)) => panic!("{e}"),
            // Refused: at the run's entry, never inside it.
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.ends_with(" at tch_scope::aoti_run"), "{msg}");
                at_entry += 1;
            }
        }
        if midway >= 5 {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    busy.join().unwrap();
    println!("deadline passed midway {midway} times (run completed), at entry {at_entry}");
    assert!(midway > 0, "no deadline passed while a run was under way");
}

/// The run's buffers come from libtorch's allocator on the calling thread:
/// `tensor_memory` counts them. wide.pt2 allocates its output (2 MiB) and
/// nothing else.
#[test]
fn tensor_memory_counts_a_runs_allocations() {
    let dir = need_packages!();
    let pkg = Package::load(dir.join("wide.pt2")).unwrap();
    let x = wide_input(dir);
    let out = scoped!(tensor_memory("aoti::wide") => pkg.run(&[&x]).unwrap());
    let r = last_memory_report().expect("a memory report");
    assert_eq!(r.name, "aoti::wide");
    let bytes = 512 * 1024 * 4;
    assert_eq!(r.delta(), bytes, "{r:?}");
    assert!(r.allocated.unwrap() >= bytes as u64, "{r:?}");
    drop(out);

    // mlp.pt2 allocates intermediates too, freed within the run.
    let e = mlp(dir);
    let out = scoped!(tensor_memory("aoti::mlp") => mlp_package(dir).run(&[&e.input]).unwrap());
    let r = last_memory_report().expect("a memory report");
    assert_eq!(r.delta(), 4 * 8 * 4, "{r:?}");
    assert!(
        r.allocated.unwrap() > 4 * 8 * 4,
        "intermediates counted: {r:?}"
    );
    assert!(r.peak_growth() > 4 * 8 * 4, "{r:?}");
    drop(out);
}

#[test]
fn no_grad_and_inference_mode_around_a_run() {
    let dir = need_packages!();
    let pkg = mlp_package(dir);
    let e = mlp(dir);
    // The package records no autograd graph: outputs never require grad.
    let x = e.input.copy().set_requires_grad(true);
    let out = pkg.run(&[&x]).unwrap();
    assert!(!out[0].requires_grad());
    assert_eq!(bits_of(&out[0]), e.runner_bits);
    let out = scoped!(no_grad => pkg.run(&[&x]).unwrap());
    assert!(!out[0].requires_grad());
    // Under inference_mode the outputs are inference tensors; outside not.
    let out = scoped!(inference_mode => pkg.run(&[&e.input]).unwrap());
    assert!(out[0].is_inference());
    assert!(!pkg.run(&[&e.input]).unwrap()[0].is_inference());
    assert_eq!(bits_of(&out[0]), e.runner_bits);
}

#[test]
fn timed_measures_runs() {
    let dir = need_packages!();
    let pkg = Package::load(dir.join("wide.pt2")).unwrap();
    let x = wide_input(dir);
    for _ in 0..3 {
        scoped!(timed("aoti::timed") => pkg.run(&[&x]).unwrap());
    }
    let t = report::report().timing("aoti::timed").cloned().unwrap();
    assert_eq!(t.count, 3);
    // Writing 2 MiB takes more than a microsecond.
    assert!(t.min > Duration::from_micros(1), "{t:?}");
}

/// `threads(n)` reaches the package's OpenMP loops: they run in libtorch's
/// own OpenMP (the package's library does not bring one), whose team size
/// follows the calling thread's count. Seen in a child process as the
/// number of OS threads: under `threads(1)` a run of wide.pt2 starts no
/// OpenMP worker; under `threads(2)` it does. The same for a TorchScript
/// forward (ATen's `parallel_for`), side by side.
#[test]
fn threads_reach_the_packages_openmp_loops() {
    let dir = need_packages!();
    let wide = json(dir, "wide");
    if wide["omp_num_threads"] != serde_json::json!([]) {
        // libtorch 2.11's export writes a fixed team size into the loops
        // (`num_threads(n)`): `threads(n)` cannot reach those.
        eprintln!(
            "skipped: this torch's export fixed the OpenMP team size ({})",
            wide["omp_num_threads"]
        );
        return;
    }
    for kind in ["pt2", "ts"] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "threads_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                "TCH_SCOPE_AOTI_THREADS_CHILD",
                format!("{kind}:{}", dir.display()),
            )
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("threads: ").map(|(_, n)| n))
            .unwrap_or_else(|| panic!("no result line: {stdout}"));
        let n: Vec<i64> = line.split(' ').map(|v| v.parse().unwrap()).collect();
        let (start, after_one, after_two) = (n[0], n[1], n[2]);
        assert_eq!(
            after_one, start,
            "{kind}, threads(1): no OpenMP worker started ({line})"
        );
        assert!(
            after_two > after_one,
            "{kind}, threads(2): OpenMP workers started ({line})"
        );
    }
}

fn os_threads() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join(name)
}

#[test]
#[ignore = "run by threads_reach_the_packages_openmp_loops in a child process"]
fn threads_child() {
    let Some(arg) = std::env::var_os("TCH_SCOPE_AOTI_THREADS_CHILD") else {
        return;
    };
    let arg = arg.into_string().unwrap();
    let (kind, dir) = arg.split_once(':').unwrap();
    let dir = PathBuf::from(dir);
    scoped!(threads(1) => {
        let run: Box<dyn Fn()> = if kind == "pt2" {
            let pkg = Package::load(dir.join("wide.pt2")).unwrap();
            let x = wide_input(&dir);
            Box::new(move || drop(pkg.run(&[&x]).unwrap()))
        } else {
            // Linear 64->128 -> ReLU -> Linear -> GELU -> Linear -> softmax:
            // elementwise work large enough for ATen's parallel_for.
            let m = tch::CModule::load(data("tensor_memory_mlp.pt")).unwrap();
            let x = Tensor::ones([8192, 64], (Kind::Float, Device::Cpu));
            Box::new(move || drop(scoped!(no_grad => m.forward_ts(&[&x]).unwrap())))
        };
        let start = os_threads();
        for _ in 0..5 {
            run();
        }
        let after_one = os_threads();
        scoped!(threads(2) => for _ in 0..5 {
            run();
        });
        let after_two = os_threads();
        println!("threads: {start} {after_one} {after_two}");
    });
}

/// The same scopes around a TorchScript forward, for the table in
/// docs/words.md: a passed deadline refuses its first operator (the
/// interpreter dispatches every operator); outputs require grad outside
/// `no_grad` (the package's never do), are inference tensors under
/// `inference_mode`.
#[test]
fn torchscript_side_by_side() {
    let m = tch::CModule::load(data("tensor_memory_mlp.pt")).unwrap();
    let x = Tensor::ones([32, 64], (Kind::Float, Device::Cpu));
    let err = try_scoped!(deadline(Duration::ZERO) => m.forward_ts(&[&x]))
        .unwrap_err()
        .to_string();
    // The interpreter dispatches each operator; the first is refused.
    assert!(err.ends_with(" at aten::linear"), "{err}");

    let under_no_grad = scoped!(no_grad => m.forward_ts(&[&x]).unwrap());
    assert!(!under_no_grad.requires_grad());
    let under_inference = scoped!(inference_mode => m.forward_ts(&[&x]).unwrap());
    assert!(under_inference.is_inference());
    assert!(m.forward_ts(&[&x]).unwrap().requires_grad());

    let out = scoped!(tensor_memory("aoti::torchscript") => scoped!(no_grad => m.forward_ts(&[&x]).unwrap()));
    let r = last_memory_report().expect("a memory report");
    assert_eq!(r.delta(), 32 * 10 * 4, "{r:?}");
    drop(out);
}

/// Loading from many threads at once is safe (one at a time inside), and
/// so is dropping.
#[test]
fn concurrent_loads_are_serialized() {
    let dir = need_packages!();
    let path = Arc::new(dir.join("mlp.pt2"));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (e, path, errors) = (mlp(dir), Arc::clone(&path), Arc::clone(&errors));
            std::thread::spawn(move || match Package::options().runners(1).load(&*path) {
                Ok(pkg) => assert_eq!(bits_of(&pkg.run(&[&e.input]).unwrap()[0]), e.runner_bits),
                Err(err) => errors.lock().unwrap().push(err.to_string()),
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(
        errors.lock().unwrap().is_empty(),
        "{:?}",
        errors.lock().unwrap()
    );
}
