//! `checkpoint` faults: a checkpoint left under a
//! passed `deadline`, a checkpoint that can't be written in full, what
//! `save_on_failure = false` keeps, and two checkpoints of one path.
//!
//! The cases that used to abort the process (a panic inside a guard's
//! `Drop` while a panic unwinds, a C++ exception escaping libtorch's
//! archive writer) run in a child process: this test binary, re-run for one
//! test with `TCH_SCOPE_CHECKPOINT_FAULTS_CHILD` set. A test that sees the
//! variable unset returns at once, so the children pass in a plain run.
//!
//! A process of its own: the exit hook and the file-size limit
//! are process-wide.
//!
//! Its modules: checkpoints in tasks that share threads
//! (`checkpoint_tasks.rs`), and a folder that can't be fsynced after the
//! rename (`checkpoint_durability.rs`).

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tch::nn::{self, VarStore};
use tch::{Device, Kind, TchError, Tensor};
use tch_scope::{
    Checkpoint, Deadline, NoGrad, Outcome, Scope, ScopeError, ScopeStack, Trainable, log_metric,
    metrics, scoped, try_scoped,
};

mod checkpoint_durability;
mod checkpoint_tasks;

const CHILD_ENV: &str = "TCH_SCOPE_CHECKPOINT_FAULTS_CHILD";

/// Whether this process is a child run by one of the tests below.
fn in_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Runs the test `name` of this binary in a process of its own, with `env`.
fn child(name: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// The child's output, for assertion messages.
fn shown(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs the child test `name` and checks it exited cleanly and said `done`.
#[track_caller]
fn child_passes(name: &str, done: &str) -> Output {
    let out = child(name, &[]);
    let text = shown(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(done),
        "{text}"
    );
    out
}

/// A fresh folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tch-scope-ckpt-faults-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn model(vs: &VarStore) -> nn::Linear {
    nn::linear(vs.root() / "lin", 4, 3, Default::default())
}

fn small_vs() -> VarStore {
    let vs = VarStore::new(Device::Cpu);
    let _m = model(&vs);
    vs
}

/// Every weight of `vs` set to `v` (outside any deadline).
fn fill(vs: &VarStore, v: f64) {
    let _g = NoGrad.enter().unwrap();
    for (_, mut t) in vs.variables() {
        let _ = t.fill_(v);
    }
}

/// The one value every weight of the file at `path` holds, read with a
/// plain `VarStore::load` (panics if they differ).
fn saved(path: &Path) -> f64 {
    let mut vs = small_vs();
    vs.load(path).unwrap();
    let mut seen = vec![];
    for (_, t) in vs.variables() {
        seen.extend(Vec::<f64>::try_from(t.flatten(0, -1).to_kind(Kind::Double)).unwrap());
    }
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");
    seen[0]
}

/// The metric log of the file at `path`.
fn saved_metrics(path: &Path) -> tch_scope::Metrics {
    let vs = small_vs();
    scoped!(checkpoint(vs, path, resume) => metrics().unwrap())
}

/// Files left in `dir` besides `keep` (a temporary file left behind).
fn left_over(dir: &Path, keep: &[&str]) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect()
}

fn square() -> Tensor {
    Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).view([2, 2])
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

/// The exit errors the hook heard, recorded by `record_exit_errors`.
static HEARD: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn record_exit_errors() {
    tch_scope::set_exit_hook(|e| HEARD.lock().unwrap().push(e.to_string()));
}

fn heard() -> Vec<String> {
    std::mem::take(&mut *HEARD.lock().unwrap())
}

/// A deadline's error: "deadline of 0 us exceeded after .. at aten::mm".
#[track_caller]
fn assert_deadline(e: &ScopeError, op: &str) {
    let msg = e.to_string();
    assert!(e.is_ended(), "{msg}");
    assert!(msg.starts_with("deadline of 0 us exceeded after "), "{msg}");
    assert!(msg.ends_with(&format!(" at {op}")), "{msg}");
}

// ---- every word left under a passed deadline ------------------------------

/// A model with a plain train/eval flag, for `eval(..)` and `train(..)`.
struct Net(Cell<bool>);

impl Trainable for Net {
    type Modes = bool;
    fn modes(&self) -> Result<bool, TchError> {
        Ok(self.0.get())
    }
    fn set_training(&self, on: bool) -> Result<(), TchError> {
        self.0.set(on);
        Ok(())
    }
    fn restore_modes(&self, modes: bool) -> Result<(), TchError> {
        self.0.set(modes);
        Ok(())
    }
}

/// What went wrong for one word, collected so that one run shows them all.
static WRONG: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn wrong(word: &str, form: &str, what: String) {
    WRONG
        .lock()
        .unwrap()
        .push(format!("{word} [{form}]: {what}"));
}

/// An entry error of the word itself (it may refuse to open on this
/// machine, or under the passed deadline): not what this test is about.
fn entry_error(e: &ScopeError) -> bool {
    !e.is_ended()
}

/// Checks the result of one form: `Ok` (`ok_allowed`), the deadline's
/// error at `aten::mm`, or the word's entry error; nothing for the hook.
fn judge(word: &str, form: &str, r: std::thread::Result<Result<(), ScopeError>>, ok_allowed: bool) {
    match r {
        Err(p) => wrong(word, form, format!("panicked: {}", panic_text(&*p))),
        Ok(Ok(())) if ok_allowed => {}
        Ok(Ok(())) => wrong(word, form, "returned Ok after a refused operator".into()),
        Ok(Err(e)) if entry_error(&e) => println!("  {word} [{form}]: not entered: {e}"),
        Ok(Err(e)) => {
            let msg = e.to_string();
            if !(msg.starts_with("deadline of 0 us exceeded") && msg.ends_with(" at aten::mm")) {
                wrong(word, form, format!("returned {msg:?}"));
            }
        }
    }
    for h in heard() {
        wrong(word, form, format!("the exit hook heard {h:?}"));
    }
}

/// `scoped!` whose body's operator is refused: one panic, with the
/// deadline's message (or the word's entry error), nothing for the hook.
fn judge_panic(word: &str, r: std::thread::Result<()>) {
    let form = "scoped!, refused operator";
    match r {
        Ok(()) => wrong(word, form, "did not panic".into()),
        Err(p) => {
            let msg = panic_text(&*p);
            let entry = msg.starts_with("cannot enter `");
            if !entry && !msg.starts_with("deadline of 0 us exceeded") {
                wrong(word, form, format!("panicked with {msg:?}"));
            }
        }
    }
    for h in heard() {
        wrong(word, form, format!("the exit hook heard {h:?}"));
    }
}

/// One word, four ways, each with a deadline that has already passed:
/// listed after `deadline` with no operator in the body (the exit alone
/// runs operators inside the deadline), with a refused operator
/// (`try_scoped!` and `scoped!`), and entered inside the deadline's body.
/// Each body logs a metric, so a checkpoint's save has one to write.
macro_rules! leave_under_a_passed_deadline {
    ($name:expr, $($word:tt)+) => {{
        let name: &str = $name;
        println!("word: {name}");
        let a = square();
        let r = catch_unwind(AssertUnwindSafe(|| {
            try_scoped!(deadline(Duration::ZERO), $($word)+ => {
                log_metric("loss", 1.0);
            })
        }));
        judge(name, "try_scoped!, no operator", r, true);
        let r = catch_unwind(AssertUnwindSafe(|| {
            try_scoped!(deadline(Duration::ZERO), $($word)+ => {
                log_metric("loss", 1.0);
                let _ = a.f_mm(&a);
            })
        }));
        judge(name, "try_scoped!, refused operator", r, false);
        let r = catch_unwind(AssertUnwindSafe(|| {
            scoped!(deadline(Duration::ZERO), $($word)+ => {
                log_metric("loss", 1.0);
                let _ = a.mm(&a);
            })
        }));
        judge_panic(name, r);
        // The word's own exit error (an `Err` of the inner `try_scoped!`),
        // or the deadline's at the exit's operator, would show here.
        let r = catch_unwind(AssertUnwindSafe(|| {
            try_scoped!(deadline(Duration::ZERO) => {
                try_scoped!($($word)+ => {
                    log_metric("loss", 1.0);
                })
            })
            .and_then(|inner| inner)
        }));
        judge(name, "inside the body", r, true);
    }};
}

/// The child of `every_word_leaves_cleanly_under_a_passed_deadline`.
#[test]
fn words_under_a_passed_deadline() {
    if !in_child() {
        return;
    }
    record_exit_errors();
    let dir = scratch("words");
    let (ckpt, prof) = (dir.join("model.ot"), dir.join("trace.json"));
    let vs = small_vs();
    let net = Net(Cell::new(true));
    let cuda = tch::Cuda::is_available();

    leave_under_a_passed_deadline!("no_grad", no_grad);
    leave_under_a_passed_deadline!("enable_grad", enable_grad);
    leave_under_a_passed_deadline!("grad", grad(false));
    leave_under_a_passed_deadline!("inference_mode", inference_mode);
    leave_under_a_passed_deadline!("device", device(cpu));
    leave_under_a_passed_deadline!("eval", eval(net));
    leave_under_a_passed_deadline!("train", train(net));
    leave_under_a_passed_deadline!("with", with(NoGrad));
    leave_under_a_passed_deadline!("timed", timed("ckpt_faults::timed"));
    leave_under_a_passed_deadline!("memory_scope", memory_scope("ckpt_faults::host"));
    leave_under_a_passed_deadline!("tensor_memory", tensor_memory("ckpt_faults::tensors"));
    leave_under_a_passed_deadline!("seed", seed(7));
    leave_under_a_passed_deadline!("fork_rng", fork_rng);
    leave_under_a_passed_deadline!("threads", threads(1));
    leave_under_a_passed_deadline!("autocast", autocast(cpu, bf16));
    leave_under_a_passed_deadline!("profile", profile(&prof));
    leave_under_a_passed_deadline!("record", record("ckpt_faults::range"));
    leave_under_a_passed_deadline!("checkpoint", checkpoint(vs, &ckpt));
    leave_under_a_passed_deadline!("detect_anomaly", detect_anomaly);
    leave_under_a_passed_deadline!("deterministic", deterministic);
    leave_under_a_passed_deadline!("matmul_precision", matmul_precision("high"));
    leave_under_a_passed_deadline!("tf32", tf32(false));
    leave_under_a_passed_deadline!("cudnn", cudnn(benchmark = false));
    leave_under_a_passed_deadline!("sdpa", sdpa(math));
    leave_under_a_passed_deadline!("deadline", with(Deadline::new(Duration::from_secs(60))));
    if cuda {
        leave_under_a_passed_deadline!("device(0)", device(0));
        leave_under_a_passed_deadline!("gpu_memory_scope", gpu_memory_scope(device = 0));
        let s = tch_scope::cuda::Stream::from_pool(0, false).unwrap();
        leave_under_a_passed_deadline!("stream", stream(s));
        let cvs = VarStore::new(Device::Cuda(0));
        let _m = model(&cvs);
        leave_under_a_passed_deadline!("checkpoint (cuda)", checkpoint(cvs, &ckpt));
    } else {
        println!("  device(0), gpu_memory_scope, stream, a CUDA checkpoint: no CUDA here");
    }
    if tch_scope::dist::Backend::Gloo.is_available() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let master = format!("127.0.0.1:{port}");
        leave_under_a_passed_deadline!(
            "distributed",
            distributed(rank = 0, world_size = 1, master = master.clone())
        );
    } else {
        println!("  distributed: built without gloo");
    }
    tch_scope::reset_exit_hook();
    let wrong = WRONG.lock().unwrap().clone();
    assert!(
        wrong.is_empty(),
        "{} failures:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    std::fs::remove_dir_all(&dir).unwrap();
    println!("all words left cleanly");
}

/// Every word, left with a deadline that has passed, leaves
/// cleanly: no abort, no panic out of `try_scoped!`, one panic out of
/// `scoped!`, nothing for the exit hook.
#[test]
fn every_word_leaves_cleanly_under_a_passed_deadline() {
    if in_child() {
        return;
    }
    child_passes("words_under_a_passed_deadline", "all words left cleanly");
}

/// The child of `a_checkpoint_left_under_a_passed_deadline_is_written`.
#[test]
fn checkpoint_under_a_passed_deadline() {
    if !in_child() {
        return;
    }
    record_exit_errors();
    let dir = scratch("deadline");
    let path = dir.join("model.ot");
    let vs = small_vs();
    let a = square();

    // try_scoped!: the deadline's error, and the checkpoint written.
    fill(&vs, 1.0);
    let r = try_scoped!(deadline(Duration::ZERO), checkpoint(vs, &path) => {
        log_metric("loss", 1.0);
        a.mm(&a)
    });
    assert_deadline(&r.unwrap_err(), "aten::mm");
    assert_eq!(saved(&path), 1.0);
    assert_eq!(saved_metrics(&path).get("loss"), [1.0]);
    println!("try_scoped! ok");

    // scoped!: one panic with the deadline's message, no abort.
    fill(&vs, 2.0);
    let p = catch_unwind(AssertUnwindSafe(|| {
        scoped!(deadline(Duration::ZERO), checkpoint(vs, &path) => {
            log_metric("loss", 2.0);
            a.mm(&a)
        })
    }))
    .unwrap_err();
    let msg = panic_text(&*p);
    assert!(msg.starts_with("deadline of 0 us exceeded after "), "{msg}");
    assert!(msg.ends_with(" at aten::mm"), "{msg}");
    assert_eq!(saved(&path), 2.0);
    assert_eq!(saved_metrics(&path).get("loss"), [2.0]);
    println!("scoped! ok");

    // An attributed function returning Result: the deadline's error.
    #[tch_scope::scope(deadline(Duration::ZERO), checkpoint(vs, path))]
    fn step(vs: &VarStore, path: &Path, a: &Tensor) -> Result<(), ScopeError> {
        log_metric("loss", 3.0);
        let _ = a.f_mm(a);
        Ok(())
    }
    fill(&vs, 3.0);
    assert_deadline(&step(&vs, &path, &a).unwrap_err(), "aten::mm");
    assert_eq!(saved(&path), 3.0);
    assert_eq!(saved_metrics(&path).get("loss"), [3.0]);
    println!("attribute ok");

    // A checkpoint entered inside the deadline's body, left while the
    // refused operator's panic unwinds.
    fill(&vs, 4.0);
    let r = try_scoped!(deadline(Duration::ZERO) => {
        scoped!(checkpoint(vs, &path) => {
            log_metric("loss", 4.0);
            let _ = a.mm(&a);
        })
    });
    assert_deadline(&r.unwrap_err(), "aten::mm");
    assert_eq!(saved(&path), 4.0);
    println!("nested ok");

    // Guards held by hand: the checkpoint dropped inside a passed deadline.
    fill(&vs, 5.0);
    let d = Deadline::new(Duration::ZERO).enter().unwrap();
    let c = Checkpoint::new(&vs, &path).enter().unwrap();
    log_metric("loss", 5.0);
    assert!(a.f_mm(&a).is_err());
    drop(c);
    drop(d);
    assert_eq!(saved(&path), 5.0);
    assert_eq!(saved_metrics(&path).get("loss"), [5.0]);
    println!("by hand ok");

    tch_scope::reset_exit_hook();
    assert_eq!(heard(), [] as [String; 0]);
    assert_eq!(left_over(&dir, &["model.ot"]), [] as [String; 0]);
    std::fs::remove_dir_all(&dir).unwrap();
    println!("checkpoint under a passed deadline: done");
}

/// A checkpoint left under a passed deadline is written, and the
/// deadline's error reaches the caller: `try_scoped!` and an attributed
/// `Result` fn return it, `scoped!` panics once with it, nothing aborts.
#[test]
fn a_checkpoint_left_under_a_passed_deadline_is_written() {
    if in_child() {
        return;
    }
    child_passes(
        "checkpoint_under_a_passed_deadline",
        "checkpoint under a passed deadline: done",
    );
}

// ---- a checkpoint that can't be written in full ---------------------------

const LIMIT_ENV: &str = "TCH_SCOPE_CHECKPOINT_FAULTS_LIMIT";
const PATH_ENV: &str = "TCH_SCOPE_CHECKPOINT_FAULTS_PATH";

/// The child of `a_checkpoint_that_cannot_be_written_in_full_keeps_the_previous_one`:
/// ignores SIGXFSZ, limits the size of any file it writes to `LIMIT_ENV`
/// bytes, and leaves a checkpoint of weights 2.0 over `PATH_ENV`.
#[test]
fn checkpoint_over_the_size_limit() {
    if !in_child() {
        return;
    }
    let path = PathBuf::from(std::env::var(PATH_ENV).unwrap());
    let limit: u64 = std::env::var(LIMIT_ENV).unwrap().parse().unwrap();
    let vs = small_vs();
    // SAFETY: plain libc calls with valid arguments, before any other
    // thread of this test writes a file.
    unsafe {
        assert_ne!(libc::signal(libc::SIGXFSZ, libc::SIG_IGN), libc::SIG_ERR);
        let rl = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &rl), 0);
    }
    let r = try_scoped!(checkpoint(vs, &path) => fill(&vs, 2.0));
    match r {
        Ok(()) => println!("result: saved"),
        Err(e) => println!("result: failed: {e}"),
    }
    // And on a panic path: the hook hears it, nothing aborts.
    record_exit_errors();
    let p = catch_unwind(AssertUnwindSafe(|| {
        scoped!(checkpoint(vs, &path) => {
            fill(&vs, 3.0);
            panic!("diverged")
        })
    }));
    assert_eq!(panic_text(&*p.unwrap_err()), "diverged");
    for h in heard() {
        println!("heard: {h}");
    }
    println!("child done");
}

/// With the size of any file limited to the previous checkpoint's
/// size minus 8 bytes, leaving a checkpoint is a reported failure that
/// keeps the previous file (or, were the new one smaller, the new one):
/// never an abort, never a torn file.
#[test]
fn a_checkpoint_that_cannot_be_written_in_full_keeps_the_previous_one() {
    if in_child() {
        return;
    }
    for ext in ["ot", "safetensors"] {
        let dir = scratch(&format!("limit-{ext}"));
        let name = format!("model.{ext}");
        let path = dir.join(&name);
        let vs = small_vs();
        fill(&vs, 1.0);
        scoped!(checkpoint(vs, &path) => ());
        let size = std::fs::metadata(&path).unwrap().len();
        let limit = (size - 8).to_string();
        let out = child(
            "checkpoint_over_the_size_limit",
            &[
                (PATH_ENV, path.to_str().unwrap()),
                (LIMIT_ENV, limit.as_str()),
            ],
        );
        let text = shown(&out);
        assert!(out.status.success(), "{ext}: {text}");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(stdout.contains("child done"), "{ext}: {text}");
        let value = saved(&path);
        if stdout.contains("result: saved") {
            assert_eq!(value, 2.0, "{ext}: {text}");
        } else {
            assert!(
                stdout.contains("result: failed: could not leave `checkpoint` cleanly: could not save the checkpoint"),
                "{ext}: {text}"
            );
            assert_eq!(value, 1.0, "{ext}: the previous checkpoint stays: {text}");
            assert!(
                stdout.contains("heard: could not leave `checkpoint` cleanly"),
                "{ext}: {text}"
            );
        }
        assert_eq!(
            left_over(&dir, &[name.as_str()]),
            [] as [String; 0],
            "{ext}: {text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

// ---- save_on_failure = false ----------------------------------------------

/// The child of `save_on_failure_false_keeps_the_last_good_file`.
#[test]
fn checkpoint_without_saving_on_failure() {
    if !in_child() {
        return;
    }
    record_exit_errors();
    let dir = scratch("no-save-on-failure");
    let path = dir.join("model.safetensors");
    let vs = small_vs();
    fill(&vs, 1.0);
    scoped!(checkpoint(vs, &path) => log_metric("step", 1.0));
    let a = square();

    // A deadline that ends the body: half of an update made, the rest refused.
    let r = try_scoped!(deadline(Duration::ZERO), checkpoint(vs, &path, save_on_failure = false) => {
        log_metric("step", 2.0);
        a.mm(&a)
    });
    assert_deadline(&r.unwrap_err(), "aten::mm");
    assert_eq!(saved(&path), 1.0, "a passed deadline");
    let p = catch_unwind(AssertUnwindSafe(|| {
        scoped!(deadline(Duration::ZERO), checkpoint(vs, &path, save_on_failure = false) => {
            a.mm(&a)
        })
    }));
    assert!(p.is_err());
    assert_eq!(saved(&path), 1.0, "a passed deadline, scoped!");
    println!("deadline ok");

    // An attributed function that returns an Err after a half update.
    #[tch_scope::checkpoint(vs, path, save_on_failure = false)]
    fn step(vs: &VarStore, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        fill(vs, 9.0);
        log_metric("step", 3.0);
        Err("bad batch")?;
        unreachable!()
    }
    assert_eq!(step(&vs, &path).unwrap_err().to_string(), "bad batch");
    assert_eq!(saved(&path), 1.0, "an Err");
    println!("err ok");

    // A panic.
    let p = catch_unwind(AssertUnwindSafe(|| {
        scoped!(checkpoint(vs, &path, save_on_failure = false) => {
            fill(&vs, 9.0);
            panic!("diverged")
        })
    }));
    assert!(p.is_err());
    assert_eq!(saved(&path), 1.0, "a panic");

    // A completed body still saves.
    scoped!(checkpoint(vs, &path, save_on_failure = false) => fill(&vs, 4.0));
    assert_eq!(saved(&path), 4.0, "completed");
    assert_eq!(saved_metrics(&path).get("step"), [] as [f64; 0]);
    tch_scope::reset_exit_hook();
    assert_eq!(heard(), [] as [String; 0]);
    std::fs::remove_dir_all(&dir).unwrap();
    println!("save_on_failure: done");
}

/// With `save_on_failure = false`, no
/// failed exit saves: a panic, an `Err`, a passed deadline.
#[test]
fn save_on_failure_false_keeps_the_last_good_file() {
    if in_child() {
        return;
    }
    child_passes(
        "checkpoint_without_saving_on_failure",
        "save_on_failure: done",
    );
}

// ---- two checkpoints of one path ------------------------------------------

/// Whether a temporary file in `dir` has bytes: a save is being written.
fn writing(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().any(|f| {
        let f = f.unwrap();
        f.file_name().to_string_lossy().contains(".tmp.") && f.metadata().is_ok_and(|m| m.len() > 0)
    })
}

/// Two checkpoints of one path, left one after the other on two
/// threads while the first one's save is still being written: the file
/// holds the one left last.
#[test]
fn the_checkpoint_left_last_wins() {
    if in_child() {
        return;
    }
    let dir = scratch("order");
    let path = dir.join("model.ot");
    // The first is big (a slow save), the second small: without an order,
    // the small one's rename lands first and the big one's last.
    let big = VarStore::new(Device::Cpu);
    let _m = model(&big);
    let _pad = nn::linear(big.root() / "pad", 4096, 4096, Default::default());
    fill(&big, 1.0);
    let small = small_vs();
    fill(&small, 2.0);

    std::thread::scope(|s| {
        let first = s.spawn(|| scoped!(checkpoint(big, &path) => ()));
        // The first exit has begun once its temporary file has bytes (the
        // entry's probe of the folder is an empty file of the same name).
        let start = Instant::now();
        while !writing(&dir) {
            assert!(start.elapsed() < Duration::from_secs(60));
            std::thread::yield_now();
        }
        scoped!(checkpoint(small, &path) => ());
        first.join().unwrap();
    });
    assert_eq!(saved(&path), 2.0, "the checkpoint left last");
    assert_eq!(left_over(&dir, &["model.ot"]), [] as [String; 0]);

    // Nested on one thread: the outer one is left last.
    scoped!(checkpoint(small, &path) => {
        fill(&small, 3.0);
        scoped!(checkpoint(small, &path) => ());
        fill(&small, 4.0);
    });
    assert_eq!(saved(&path), 4.0);
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- the hand-held API ------------------------------------------------------------

/// `Checkpoint::save_on_failure(false)` in a `ScopeStack` closed with
/// `Outcome::Failed`, and a hand-held guard whose thread had an operator
/// refused by a deadline while it was open, save nothing.
#[test]
fn save_on_failure_false_by_hand() {
    if in_child() {
        return;
    }
    let dir = scratch("by-hand");
    let path = dir.join("model.ot");
    let vs = small_vs();
    fill(&vs, 1.0);
    scoped!(checkpoint(vs, &path) => ());

    let mut stack = ScopeStack::new();
    stack
        .enter(Checkpoint::new(&vs, &path).save_on_failure(false))
        .unwrap();
    fill(&vs, 2.0);
    stack.close(Outcome::Failed);
    assert_eq!(saved(&path), 1.0, "closed Failed");

    let c = Checkpoint::new(&vs, &path)
        .save_on_failure(false)
        .enter()
        .unwrap();
    let d = Deadline::new(Duration::ZERO).enter().unwrap();
    assert!(Tensor::f_zeros([2], (Kind::Float, Device::Cpu)).is_err());
    drop(d);
    drop(c);
    assert_eq!(saved(&path), 1.0, "a refused operator while open");

    let mut stack = ScopeStack::new();
    stack
        .enter(Checkpoint::new(&vs, &path).save_on_failure(false))
        .unwrap();
    stack.close(Outcome::Completed);
    assert_eq!(saved(&path), 2.0, "closed Completed");
    std::fs::remove_dir_all(&dir).unwrap();
}
