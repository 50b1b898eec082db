//! Scopes over process-wide libtorch state: `seed` / `fork_rng` (the
//! default generators), `detect_anomaly`, `deterministic`; and the
//! crash-safety of `checkpoint`, by killing a child process mid-save.
//! A process of their own, and one test at a time (`serial()`), so that no
//! other test draws random numbers or flips a flag under them.

#[allow(dead_code, reason = "each test binary uses a part of it")]
mod bundle;
#[path = "oracle.rs"]
mod oracle;
#[path = "process_wide/seed_integers.rs"]
mod seed_integers;

use std::panic::catch_unwind;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tch::nn::{self, VarStore};
use tch::{Device, Kind, Tensor};
use tch_scope::{
    DetectAnomaly, NoGrad, Scope, anomaly_mode, deterministic_mode, log_metric, scoped, try_scoped,
};

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn rand(n: i64) -> Vec<f32> {
    Vec::try_from(Tensor::rand([n], (Kind::Float, Device::Cpu))).unwrap()
}

// ---- seed / fork_rng ------------------------------------------------------------

/// From the oracle, PyTorch 2.13:
/// `~/.cache/tch-scope/venv-torch-2.13.0/bin/python -c
///  "import torch; torch.manual_seed(42); print(torch.rand(3).tolist())"`
#[allow(clippy::excessive_precision, reason = "the oracle's output, verbatim")]
const TORCH_SEED_42_RAND_3: [f32; 3] =
    [0.8822692632675171, 0.9150039553642273, 0.38286375999450684];

#[test]
fn seed_draws_what_pytorch_draws() {
    let _s = serial();
    assert_eq!(scoped!(seed(42) => rand(3)), TORCH_SEED_42_RAND_3);
}

/// The numbers drawn after a scope are those drawn had it never run.
fn unaffected_by(scope: impl FnOnce()) {
    tch::manual_seed(3);
    let _ = rand(5);
    let want = rand(8);
    tch::manual_seed(3);
    let _ = rand(5);
    scope();
    assert_eq!(rand(8), want);
}

#[test]
fn seed_and_fork_rng_leave_the_stream_untouched() {
    let _s = serial();
    unaffected_by(|| {
        let _ = scoped!(seed(42) => rand(100));
    });
    unaffected_by(|| {
        let _ = scoped!(fork_rng => rand(100));
    });
    // Nested: the inner seed is undone at its end, the outer at its end.
    let nested = || {
        scoped!(seed(1) => {
            let _ = scoped!(seed(2) => rand(10));
            (rand(2), scoped!(fork_rng => rand(2)), rand(2))
        })
    };
    let mut got = None;
    unaffected_by(|| got = Some(nested()));
    let (a, b, c) = got.unwrap();
    assert_eq!(c, b, "fork_rng does not reseed, and rewinds");
    tch::manual_seed(1);
    assert_eq!(
        (rand(2), rand(2)),
        (a, b),
        "the outer seed's stream goes on"
    );
}

/// Scopes of one thread that end out of order: the first to end is not
/// the newest, so nothing is put back yet, and the last to end puts back
/// the state before the first, as the crate promises for every
/// process-wide word.
#[test]
fn seed_and_fork_rng_end_in_any_order() {
    let _s = serial();
    for (first, second) in [
        (tch_scope::Seed(1), tch_scope::Seed(2)),
        (tch_scope::Seed(5), tch_scope::Seed(5)),
    ] {
        unaffected_by(|| {
            let a = { first }.enter().unwrap();
            let _ = rand(3);
            let b = { second }.enter().unwrap();
            let _ = rand(3);
            drop(a);
            // `b` is still open: its seed's stream goes on.
            let inside = rand(2);
            tch::manual_seed(i64::try_from(second.0).unwrap());
            let _ = rand(3);
            assert_eq!(rand(2), inside, "the newest scope's stream goes on");
            drop(b);
        });
    }
    // Three, the middle one first: the newest hands the oldest's stream back
    // where it was when the middle one began.
    unaffected_by(|| {
        let a = tch_scope::Seed(1).enter().unwrap();
        let _ = rand(4);
        let b = tch_scope::ForkRng.enter().unwrap();
        let c = tch_scope::Seed(3).enter().unwrap();
        drop(b);
        let _ = rand(7);
        drop(c);
        let after = rand(2);
        tch::manual_seed(1);
        let _ = rand(4);
        assert_eq!(
            rand(2),
            after,
            "the oldest's stream, as before the middle one"
        );
        drop(a);
    });
}

/// The generator's cached normal sample is part of its state: a CPU normal
/// draw of fewer than 16 values makes Box–Muller pairs and keeps the second
/// value for the next draw. The draw after the scope takes the value cached
/// before it, as it would have had the scope never run.
#[test]
fn fork_rng_and_seed_keep_the_cached_normal_sample() {
    let _s = serial();
    let randn = |n: i64| -> Vec<f64> {
        Vec::try_from(Tensor::randn([n], (Kind::Double, Device::Cpu))).unwrap()
    };
    tch::manual_seed(11);
    let _ = randn(1); // leaves one value cached
    let want = randn(3);
    for scope in [0, 1] {
        tch::manual_seed(11);
        let _ = randn(1);
        if scope == 0 {
            let _ = scoped!(fork_rng => randn(1));
        } else {
            let _ = scoped!(seed(5) => randn(2));
        }
        assert_eq!(randn(3), want, "scope {scope}");
    }
}

#[test]
fn seed_restores_on_panic() {
    let _s = serial();
    unaffected_by(|| {
        let r = catch_unwind(|| {
            scoped!(seed(42) => {
                let _ = rand(7);
                panic!("boom")
            })
        });
        assert!(r.is_err());
    });
}

#[tch_scope::seed(42)]
fn seeded_draw() -> Vec<f32> {
    rand(3)
}

#[tch_scope::fork_rng]
fn forked_draw() -> Vec<f32> {
    rand(3)
}

#[test]
fn seed_and_fork_rng_attributes() {
    let _s = serial();
    unaffected_by(|| assert_eq!(seeded_draw(), TORCH_SEED_42_RAND_3));
    unaffected_by(|| {
        let _ = forked_draw();
    });
}

#[test]
fn seed_covers_cuda_generators() {
    let _s = serial();
    if !bundle::cuda_or_skip("seed_covers_cuda_generators") {
        return;
    }
    let draw = || Tensor::rand([4], (Kind::Float, Device::Cuda(0))).to(Device::Cpu);
    tch::manual_seed(9);
    let want = draw();
    tch::manual_seed(9);
    let a = scoped!(seed(42) => draw());
    assert!(draw().equal(&want), "CUDA stream restored");
    let b = scoped!(seed(42) => draw());
    assert!(a.equal(&b), "CUDA generator seeded");
}

/// `devices = [..]`: the CPU stream is forked (and seeded) as without it;
/// a CUDA device that is not there is a ScopeError naming it.
#[test]
fn fork_rng_and_seed_on_listed_devices() {
    let _s = serial();
    unaffected_by(|| {
        let _ = scoped!(fork_rng(devices = []) => rand(100));
    });
    unaffected_by(|| {
        let _ = scoped!(seed(42, devices = []) => rand(100));
    });
    assert_eq!(
        scoped!(seed(42, devices = []) => rand(3)),
        TORCH_SEED_42_RAND_3
    );
    let n = tch_scope::cuda_device_count();
    let e = try_scoped!(fork_rng(devices = [n]) => ()).unwrap_err();
    assert_eq!(e.device(), Some(Device::Cuda(n)));
    assert_eq!(e.scope(), format!("fork_rng(devices = [{n}])"));
    assert!(e.reason().contains(&format!("no CUDA device {n}")), "{e}");
    let e = try_scoped!(seed(1, devices = [0, n]) => ()).unwrap_err();
    assert_eq!(e.scope(), format!("seed(1, devices = [0, {n}])"));
    // A failed entry changed nothing.
    unaffected_by(|| {
        let _ = try_scoped!(seed(5, devices = [n]) => rand(3));
    });
}

#[test]
fn fork_rng_on_device_0_leaves_the_other_devices_alone() {
    let _s = serial();
    if !bundle::cuda_or_skip("fork_rng_on_device_0_leaves_the_other_devices_alone") {
        return;
    }
    let draw = || Tensor::rand([4], (Kind::Float, Device::Cuda(0))).to(Device::Cpu);
    tch::manual_seed(9);
    let want = draw();
    tch::manual_seed(9);
    let a = scoped!(seed(42, devices = [0]) => draw());
    assert!(draw().equal(&want), "CUDA stream of device 0 restored");
    let b = scoped!(seed(42) => draw());
    assert!(a.equal(&b), "device 0 seeded as by seed(42)");
    // Device 0 not listed: its stream goes on inside, and is not rewound.
    tch::manual_seed(9);
    let first = scoped!(fork_rng(devices = []) => draw());
    assert!(first.equal(&want), "device 0 not forked: same stream");
    assert!(!draw().equal(&want), "and not rewound");
}

// ---- detect_anomaly -----------------------------------------------------------

fn nan_backward() -> Result<(), tch::TchError> {
    let x = Tensor::from_slice(&[0.0f32]).set_requires_grad(true);
    // sqrt'(0) is inf; times 0 gives NaN in the backward pass only.
    (x.sqrt() * 0.0).sum(Kind::Float).f_backward()
}

#[test]
fn detect_anomaly_catches_nan_in_backward_and_restores() {
    let _s = serial();
    assert_eq!(anomaly_mode(), None);
    assert!(nan_backward().is_ok());
    let e = scoped!(detect_anomaly => nan_backward()).unwrap_err();
    assert!(e.to_string().contains("returned nan values"), "{e}");
    assert_eq!(anomaly_mode(), None);

    let nested = scoped!(detect_anomaly => {
        let inner = scoped!(detect_anomaly(check_nan = false) => (anomaly_mode(), nan_backward().is_ok()));
        (inner, anomaly_mode())
    });
    assert_eq!(nested, ((Some(false), true), Some(true)));
    let off = scoped!(detect_anomaly, with(DetectAnomaly::new().enabled(false)) => anomaly_mode());
    assert_eq!(off, None);
    assert_eq!(anomaly_mode(), None);
}

#[test]
fn detect_anomaly_is_process_wide() {
    let _s = serial();
    let seen = scoped!(detect_anomaly => std::thread::spawn(anomaly_mode).join().unwrap());
    assert_eq!(seen, Some(true));
}

// ---- deterministic ----------------------------------------------------------------

#[test]
fn deterministic_sets_and_restores_both_flags() {
    let _s = serial();
    assert_eq!(deterministic_mode(), None);
    let seen = scoped!(deterministic(warn_only) => {
        let inner = scoped!(deterministic => deterministic_mode());
        (inner, deterministic_mode())
    });
    assert_eq!(seen, (Some(false), Some(true)));
    assert_eq!(deterministic_mode(), None);
    let r = catch_unwind(|| scoped!(deterministic => panic!("boom")));
    assert!(r.is_err());
    assert_eq!(deterministic_mode(), None);
}

#[test]
fn deterministic_fills_uninitialized_memory_like_pytorch() {
    // PyTorch: under use_deterministic_algorithms(True), torch.empty(3)
    // is tensor([nan, nan, nan]).
    let _s = serial();
    let empty = scoped!(deterministic => Tensor::empty([3], (Kind::Float, Device::Cpu)));
    assert!(
        Vec::<f32>::try_from(empty)
            .unwrap()
            .iter()
            .all(|v| v.is_nan())
    );
    let seen = scoped!(deterministic => std::thread::spawn(deterministic_mode).join().unwrap());
    assert_eq!(seen, Some(false), "every thread sees it");
}

// ---- checkpoint: kill -9 at random moments ---------------------------------------

const CHILD_ENV: &str = "TCH_SCOPE_CHECKPOINT_CHILD";

fn big_model(vs: &VarStore) {
    // ~4 MB of weights, so a save takes long enough to be interrupted.
    // Constant weights: a random init would draw from the CPU generator
    // that the seed tests of this binary compare streams of.
    let _ = nn::linear(vs.root() / "a", 1024, 1024, constant());
    let _ = nn::linear(vs.root() / "b", 16, 16, constant());
}

/// The child: saves checkpoints in a loop until killed. Every save holds
/// weights all equal to the step and a metric log `step = [0, 1, .., step]`.
#[test]
fn checkpoint_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return; // only when re-executed by `checkpoint_survives_kill`
    };
    let vs = VarStore::new(Device::Cpu);
    big_model(&vs);
    loop {
        scoped!(checkpoint(vs, &path, resume) => {
            let step = tch_scope::metrics().unwrap().get("step").len();
            let _g = NoGrad.enter().unwrap();
            for (_, mut t) in vs.variables() {
                let _ = t.fill_(step as f64);
            }
            log_metric("step", step as f64);
        });
    }
}

fn inode(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.ino())
}

/// A process killed (SIGKILL) at a random moment while saving over and over
/// always leaves a loadable checkpoint whose weights match its metrics.
#[test]
fn checkpoint_survives_kill() {
    // Its resume puts the saved CPU generator back: process-wide, so not
    // while a seed test draws.
    let _s = serial();
    let dir = std::env::temp_dir().join(format!("tch-scope-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.ot");
    let exe = std::env::current_exe().unwrap();
    // A small xorshift: random kill times without a dependency.
    let mut x = std::process::id() as u64 | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut last_step = -1.0;
    let (rounds, mut interrupted) = (12, 0);
    for _ in 0..rounds {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "checkpoint_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Wait for this child's first save (a rename: a new inode), then
        // kill it at a random moment of the saves that follow.
        let before = inode(&path);
        let start = Instant::now();
        while inode(&path) == before && start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(next() % 150));
        child.kill().unwrap();
        child.wait().unwrap();
        // The child's temporary file (`.model.PID.N.tmp.ot`) is left: the
        // kill landed mid-save.
        let prefix = format!(".model.{}.", child.id());
        interrupted += usize::from(std::fs::read_dir(&dir).unwrap().any(|f| {
            let name = f.unwrap().file_name().to_string_lossy().into_owned();
            name.starts_with(&prefix) && name.ends_with(".tmp.ot")
        }));

        let mut vs = VarStore::new(Device::Cpu);
        big_model(&vs);
        // A plain VarStore load must succeed ...
        vs.load(&path).unwrap();
        // ... and the metric log saved with it must match the weights.
        let again = VarStore::new(Device::Cpu);
        big_model(&again);
        let steps = scoped!(checkpoint(again, &path, resume) => tch_scope::metrics().unwrap());
        let steps = steps.get("step").to_vec();
        let want: Vec<f64> = (0..steps.len()).map(|i| i as f64).collect();
        assert_eq!(steps, want);
        let step = *steps.last().unwrap();
        for (name, t) in again.variables() {
            let (lo, hi) = (t.min().double_value(&[]), t.max().double_value(&[]));
            assert!(lo == step && hi == step, "{name}: {lo}..{hi}, step {step}");
        }
        assert!(step > last_step, "each round saved, and nothing went back");
        last_step = step;
    }
    eprintln!("{interrupted} of {rounds} kills landed mid-save; last step {last_step}");
    assert!(
        interrupted > 0,
        "no kill interrupted a save: the test proved nothing"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `seed` in async code seeds once for the whole future: draws on both
/// sides of a suspension continue one stream, as under `torch.manual_seed`.
#[test]
fn seed_spans_an_awaiting_body_instead_of_reseeding_per_poll() {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};
    struct YieldOnce(bool);
    impl Future for YieldOnce {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            if std::mem::replace(&mut self.0, true) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }
    let _s = serial();
    unaffected_by(|| {
        let mut task = Box::pin(async {
            scoped!(seed(42) => {
                let first = rand(2);
                YieldOnce(false).await;
                let mut both = first;
                both.extend(rand(1));
                both
            })
        });
        let mut cx = Context::from_waker(Waker::noop());
        assert!(task.as_mut().poll(&mut cx).is_pending());
        let Poll::Ready(draws) = task.as_mut().poll(&mut cx) else {
            panic!("ready after one suspension")
        };
        assert_eq!(
            draws, TORCH_SEED_42_RAND_3,
            "one seeded stream across the await"
        );
    });
}

#[tch_scope::threads(1)]
fn single_threaded() -> i32 {
    tch::get_num_threads()
}

#[test]
fn threads_sets_and_restores_the_intra_op_thread_count() {
    let _s = serial();
    let before = tch::get_num_threads();
    assert_eq!(scoped!(threads(1) => tch::get_num_threads()), 1);
    assert_eq!(single_threaded(), 1);
    assert_eq!(tch::get_num_threads(), before);
    // Nested: the inner count inside, the outer one after it.
    scoped!(threads(3) => {
        assert_eq!(tch::get_num_threads(), 3);
        scoped!(threads(2) => assert_eq!(tch::get_num_threads(), 2));
        assert_eq!(tch::get_num_threads(), 3);
    });
    // Restored on panic.
    let r = std::panic::catch_unwind(|| scoped!(threads(1) => panic!("boom")));
    assert!(r.is_err());
    assert_eq!(tch::get_num_threads(), before);
    // A count libtorch would refuse is a ScopeError, and changes nothing.
    let e = tch_scope::try_scoped!(threads(0) => ()).unwrap_err();
    assert_eq!(e.scope(), "threads(0)");
    assert!(e.reason().contains("between 1 and"), "{e}");
    assert_eq!(tch::get_num_threads(), before);
}

#[test]
fn threads_changes_what_another_thread_sees() {
    let _s = serial();
    let before = tch::get_num_threads();
    let (inside, other) = scoped!(threads(1) => (
        tch::get_num_threads(),
        std::thread::spawn(tch::get_num_threads).join().unwrap(),
    ));
    assert_eq!(inside, 1);
    println!("threads(1): this thread {inside}, a thread spawned inside {other} (before {before})");
    assert_eq!(other, 1, "a thread spawned inside sees the scope's count");
}

// ---- exit failures reach the caller -----------------------------------

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tch-scope-exit-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn small_vs() -> VarStore {
    let vs = VarStore::new(Device::Cpu);
    let _ = nn::linear(vs.root(), 2, 1, constant());
    vs
}

/// A linear layer's settings that draw nothing from the generators.
fn constant() -> nn::LinearConfig {
    nn::LinearConfig {
        ws_init: nn::Init::Const(0.5),
        bs_init: Some(nn::Init::Const(0.0)),
        bias: true,
    }
}

#[test]
fn checkpoint_and_profile_paths_are_checked_at_entry() {
    let _s = serial();
    let vs = small_vs();
    let ran = std::cell::Cell::new(false);
    let e = try_scoped!(checkpoint(vs, "/missing-dir/model.ot") => ran.set(true)).unwrap_err();
    assert!(!ran.get(), "the body did not run");
    assert_eq!(e.scope(), "checkpoint(\"/missing-dir/model.ot\")");
    assert!(
        e.to_string()
            .contains("/missing-dir/model.ot can't be written: its folder /missing-dir"),
        "{e}"
    );
    // A folder where the file should be.
    let dir = scratch("ckpt-is-dir");
    let e = try_scoped!(checkpoint(vs, &dir) => ()).unwrap_err();
    assert!(e.to_string().contains("it is a folder"), "{e}");
    let e = try_scoped!(profile("/missing-dir/trace.json") => ()).unwrap_err();
    assert!(
        e.to_string()
            .contains("/missing-dir/trace.json can't be written"),
        "{e}"
    );
    // The profiler was not started: a good path works at once.
    let ok = dir.join("trace.json");
    try_scoped!(profile(&ok) => ()).unwrap();
    assert!(ok.exists());
    // A folder that can't be written (not as root: root writes anyway).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let ro = dir.join("ro");
        std::fs::create_dir(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        let probe = std::fs::File::create(ro.join("probe")).is_ok();
        if !probe {
            let e = try_scoped!(checkpoint(vs, ro.join("m.ot")) => ()).unwrap_err();
            assert!(e.to_string().contains("is not writable"), "{e}");
        }
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_checkpoint_whose_folder_disappears_is_the_callers_error() {
    let _s = serial();
    let before = tch_scope::exit_errors_reported();
    let vs = small_vs();
    let dir = scratch("vanish");
    let path = dir.join("model.ot");
    let r = try_scoped!(checkpoint(vs, &path) => {
        std::fs::remove_dir_all(&dir).unwrap();
        7
    });
    let e = r.unwrap_err();
    assert!(e.is_ended());
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "could not leave `checkpoint` cleanly: could not save the checkpoint {}: ",
            path.display()
        )),
        "{msg}"
    );
    assert!(
        !msg.contains("Exception raised from") && !msg.contains("frame #"),
        "{msg}"
    );
    assert_eq!(msg.lines().count(), 1, "{msg}");
    assert_eq!(
        tch_scope::exit_errors_reported(),
        before,
        "the hook heard nothing"
    );

    // scoped! panics with it.
    std::fs::create_dir_all(&dir).unwrap();
    let p = catch_unwind(std::panic::AssertUnwindSafe(
        || scoped!(checkpoint(vs, &path) => std::fs::remove_dir_all(&dir).unwrap()),
    ))
    .unwrap_err();
    let p = p.downcast_ref::<String>().unwrap();
    assert!(p.starts_with("could not leave `checkpoint` cleanly"), "{p}");

    // On a panic path, the hook hears it, in one line, without a backtrace.
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    tch_scope::set_exit_hook(|e| SEEN.lock().unwrap().push(e.to_string()));
    std::fs::create_dir_all(&dir).unwrap();
    let r = catch_unwind(std::panic::AssertUnwindSafe(|| {
        scoped!(checkpoint(vs, &path) => {
            std::fs::remove_dir_all(&dir).unwrap();
            panic!("boom")
        })
    }));
    tch_scope::reset_exit_hook();
    assert!(r.is_err());
    let seen = SEEN.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].contains(&path.display().to_string()), "{seen:?}");
    assert_eq!(seen[0].lines().count(), 1, "{seen:?}");
}

#[test]
fn save_on_failure_false_keeps_the_last_good_file() {
    let _s = serial();
    let vs = small_vs();
    let dir = scratch("keep");
    let path = dir.join("model.safetensors");
    scoped!(checkpoint(vs, &path) => log_metric("step", 1.0));
    let good = std::fs::read(&path).unwrap();
    for save in [false, true] {
        let r = catch_unwind(std::panic::AssertUnwindSafe(|| {
            scoped!(checkpoint(vs, &path, save_on_failure = save) => {
                log_metric("step", 2.0);
                panic!("diverged")
            })
        }));
        assert!(r.is_err());
        let now = std::fs::read(&path).unwrap();
        assert_eq!(now == good, !save, "save_on_failure = {save}");
    }
    // No temporary file left behind.
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 1, "{left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_threads_checkpointing_one_path_never_share_a_temporary_file() {
    let _s = serial();
    let dir = scratch("two-writers");
    let path = dir.join("model.ot");
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (path, barrier) = (path.clone(), std::sync::Arc::clone(&barrier));
            std::thread::spawn(move || {
                let vs = small_vs();
                for _ in 0..10 {
                    barrier.wait();
                    try_scoped!(checkpoint(vs, &path) => ()).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut again = small_vs();
    again.load(&path).unwrap();
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 1, "{left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_user_scope_whose_exit_fails_makes_try_scoped_an_err() {
    let _s = serial();
    struct Upload;
    impl Scope for Upload {
        type Guard = ();
        type Error = std::convert::Infallible;
        fn enter(&mut self) -> Result<(), std::convert::Infallible> {
            Ok(())
        }
        fn exit(_: &mut (), _: tch_scope::Outcome) {
            tch_scope::ExitError::new("upload", "the server said no").report();
        }
    }
    let e = try_scoped!(no_grad, with(Upload), fork_rng => 5).unwrap_err();
    assert_eq!(
        e.to_string(),
        "could not leave `upload` cleanly: the server said no"
    );
    // An Err of the body stays the body's: the exit error goes to the hook.
    let before = tch_scope::exit_errors_reported();
    tch_scope::set_exit_hook(|_| {});
    let e = try_scoped!(with(Upload), device("cuda:9") => 5).unwrap_err();
    tch_scope::reset_exit_hook();
    if tch_scope::cuda_device_count() < 10 {
        assert!(e.to_string().contains("cuda:9"), "{e}");
        assert_eq!(tch_scope::exit_errors_reported(), before + 1);
    }
    assert!(tch_scope::is_grad_enabled());
}

// ---- exit failures of attributed functions returning `Result` ------------------

/// A user scope whose exit fails when told to.
struct Upload(&'static std::sync::atomic::AtomicBool);

impl Scope for Upload {
    type Guard = bool;
    type Error = std::convert::Infallible;
    fn enter(&mut self) -> Result<bool, std::convert::Infallible> {
        Ok(self.0.load(std::sync::atomic::Ordering::SeqCst))
    }
    fn exit(fail: &mut bool, _: tch_scope::Outcome) {
        if *fail {
            tch_scope::ExitError::new("upload", "the server said no").report();
        }
    }
}

/// `Drop`-side failure, as in async code (where `Scope::exit` isn't called).
struct DropUpload(&'static std::sync::atomic::AtomicBool);
struct DropUploadGuard(bool);
impl Drop for DropUploadGuard {
    fn drop(&mut self) {
        if self.0 {
            tch_scope::ExitError::new("upload", "the server said no").report();
        }
    }
}
impl Scope for DropUpload {
    type Guard = DropUploadGuard;
    type Error = std::convert::Infallible;
    fn enter(&mut self) -> Result<DropUploadGuard, std::convert::Infallible> {
        Ok(DropUploadGuard(
            self.0.load(std::sync::atomic::Ordering::SeqCst),
        ))
    }
}

static FAIL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[tch_scope::scope(timed("exits::upload"), with(Upload(&FAIL)), no_grad)]
fn upload(x: i32) -> Result<i32, tch_scope::ScopeError> {
    if x < 0 {
        // An early `return` passes the exits too.
        return Ok(-x);
    }
    let v: i32 = "7"
        .parse()
        .map_err(|_| tch_scope::ScopeError::new("parse", None, "not a number"))?;
    Ok(x + v)
}

#[tch_scope::with(Upload(&FAIL))]
fn upload_err() -> Result<i32, tch_scope::ScopeError> {
    Err(tch_scope::ScopeError::new(
        "body",
        None,
        "the body's own error",
    ))
}

// `with` is entered around each poll: one poll each, so that its one exit
// is the one at completion.
#[tch_scope::scope(no_grad, with(DropUpload(&FAIL)))]
async fn upload_async(x: i32) -> Result<i32, tch_scope::ScopeError> {
    Ok(x + 1)
}

#[tch_scope::with(DropUpload(&FAIL))]
async fn upload_async_err() -> Result<i32, tch_scope::ScopeError> {
    Err(tch_scope::ScopeError::new(
        "body",
        None,
        "the body's own error",
    ))
}

fn with_failing_exits<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    SEEN.lock().unwrap().clear();
    tch_scope::set_exit_hook(|e| SEEN.lock().unwrap().push(e.to_string()));
    FAIL.store(true, std::sync::atomic::Ordering::SeqCst);
    let r = catch_unwind(std::panic::AssertUnwindSafe(f));
    FAIL.store(false, std::sync::atomic::Ordering::SeqCst);
    tch_scope::reset_exit_hook();
    let seen = SEEN.lock().unwrap().clone();
    (r.unwrap(), seen)
}

#[test]
fn attributed_result_functions_return_a_failed_exit_as_their_err() {
    let _s = serial();
    let before = tch_scope::report()
        .timing("exits::upload")
        .map_or(0, |t| t.failed);
    assert_eq!(upload(1), Ok(8), "exits that don't fail change nothing");
    let (r, heard) = with_failing_exits(|| (upload(1), upload(-3)));
    for r in [r.0, r.1] {
        let e = r.unwrap_err();
        assert!(e.is_ended(), "{e}");
        assert_eq!(
            e.to_string(),
            "could not leave `upload` cleanly: the server said no"
        );
    }
    assert!(
        heard.is_empty(),
        "the caller got it, not the hook: {heard:?}"
    );
    assert!(tch_scope::is_grad_enabled(), "no_grad left all the same");
    // The scopes outside the failed exit (timed) saw the run fail.
    let failed = tch_scope::report().timing("exits::upload").unwrap().failed;
    assert_eq!(failed, before + 2);
    // The body's own `Err` wins; the hook hears the exit's.
    let (r, heard) = with_failing_exits(upload_err);
    assert_eq!(
        r.unwrap_err().to_string(),
        "cannot enter `body`: the body's own error"
    );
    assert_eq!(
        heard,
        ["could not leave `upload` cleanly: the server said no"]
    );
}

#[test]
fn async_result_functions_return_a_failed_exit_as_their_err() {
    let _s = serial();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    assert_eq!(rt.block_on(rt.spawn(upload_async(1))).unwrap(), Ok(2));
    let ((r, r_err), heard) = with_failing_exits(|| {
        rt.block_on(async {
            (
                tokio::spawn(upload_async(1)).await.unwrap(),
                tokio::spawn(upload_async_err()).await.unwrap(),
            )
        })
    });
    let e = r.unwrap_err();
    assert!(e.is_ended(), "{e}");
    assert_eq!(
        e.to_string(),
        "could not leave `upload` cleanly: the server said no"
    );
    assert_eq!(
        r_err.unwrap_err().to_string(),
        "cannot enter `body`: the body's own error"
    );
    assert_eq!(
        heard,
        ["could not leave `upload` cleanly: the server said no"],
        "only the failed body's exit error went to the hook"
    );
}

/// `checkpoint` spans the whole future: saved once, at completion, after
/// the folder went away across an await.
#[tch_scope::checkpoint(vs, path)]
async fn save_after_async(
    vs: VarStore,
    path: std::path::PathBuf,
    dir: std::path::PathBuf,
) -> Result<i32, tch_scope::ScopeError> {
    tokio::task::yield_now().await;
    std::fs::remove_dir_all(&dir).unwrap();
    tokio::task::yield_now().await;
    Ok(1)
}

#[test]
fn an_async_checkpoint_whose_folder_disappears_returns_err() {
    let _s = serial();
    // A checkpoint's guard is not `Send` (its metric log is per thread).
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let before = tch_scope::exit_errors_reported();
    let dir = scratch("vanish-async");
    let path = dir.join("model.ot");
    let e = rt
        .block_on(save_after_async(small_vs(), path.clone(), dir))
        .unwrap_err();
    assert_failed_save_returned(&e, &path, before);
}

/// `e` is the failed save of `path`, returned to the caller: the exit hook
/// heard nothing since `before`.
fn assert_failed_save_returned(e: &tch_scope::ScopeError, path: &std::path::Path, before: u64) {
    assert!(
        e.to_string().starts_with(&format!(
            "could not leave `checkpoint` cleanly: could not save the checkpoint {}: ",
            path.display()
        )),
        "{e}"
    );
    assert_eq!(
        tch_scope::exit_errors_reported(),
        before,
        "the hook heard nothing"
    );
}

#[tch_scope::checkpoint(vs, path)]
fn save_after(
    vs: &VarStore,
    path: &std::path::Path,
    dir: &std::path::Path,
) -> Result<i32, tch_scope::ScopeError> {
    let _ = (vs, path);
    std::fs::remove_dir_all(dir).unwrap();
    Ok(1)
}

#[test]
fn an_attributed_checkpoint_whose_folder_disappears_returns_err() {
    let _s = serial();
    let before = tch_scope::exit_errors_reported();
    let vs = small_vs();
    let dir = scratch("vanish-attr");
    let path = dir.join("model.ot");
    let e = save_after(&vs, &path, &dir).unwrap_err();
    assert_failed_save_returned(&e, &path, before);
}
