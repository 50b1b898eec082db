//! The demo's stop and resume: a training run in a child process is sent
//! SIGINT (Ctrl-C) in the middle, saves the step it was at, ends as Ctrl-C
//! would have, and a second run resumes it; its final weights are compared
//! with a run that was never stopped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use tch::nn::{self, Module, ModuleT};
use tch::{Device, Kind, Tensor};
use tch_scope::optim::Sgd;
use tch_scope::{Checkpoint, scoped, steps};

/// The argument that makes the demo binary the training child.
pub const CHILD: &str = "--resumable-run";

const STEPS: i64 = 40;

/// The child: 40 steps of a small MLP with dropout on minibatches drawn
/// from the generator, `checkpoint(.., resume, optimizer = opt, every = 5)`.
pub fn child(path: &Path) {
    tch::manual_seed(0);
    let vs = nn::VarStore::new(Device::Cpu);
    let l1 = nn::linear(vs.root() / "l1", 1, 16, Default::default());
    let l2 = nn::linear(vs.root() / "l2", 16, 1, Default::default());
    let x = Tensor::randn([256, 1], (Kind::Float, Device::Cpu));
    let y = &x * 3.0 - 2.0;
    let opt = Sgd::new(&vs, 0.05).unwrap().momentum(0.9);
    scoped!(checkpoint(vs, path, resume, optimizer = opt, every = 5) => {
        let mut first = true;
        for step in steps(STEPS) {
            if std::mem::take(&mut first) {
                println!("start {step}");
            }
            let idx = Tensor::randint(256, [32], (Kind::Int64, Device::Cpu));
            let h = l1.forward(&x.index_select(0, &idx)).relu().dropout(0.2, true);
            let loss = l2.forward_t(&h, true).mse_loss(&y.index_select(0, &idx), tch::Reduction::Mean);
            opt.backward_step(&loss).unwrap();
            tch_scope::log_metric("loss", loss.double_value(&[]));
            println!("step {step}");
            // A slow step, as a real one is: time for Ctrl-C to land.
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    });
}

fn spawn(path: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .arg(CHILD)
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Runs the child to its end; `interrupt_at`: sends it SIGINT once it
/// reports that step. Returns its first step and how it ended.
fn run(path: &Path, interrupt_at: Option<i64>) -> (i64, std::process::ExitStatus) {
    let mut child = spawn(path);
    let mut first = 0;
    let out = BufReader::new(child.stdout.take().unwrap());
    for line in out.lines().map_while(Result::ok) {
        if let Some(s) = line.strip_prefix("start ") {
            first = s.parse().unwrap_or(0);
        }
        if interrupt_at.is_some_and(|at| line == format!("step {at}")) {
            // What Ctrl-C does: SIGINT to the process.
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
        }
    }
    (first, child.wait().unwrap())
}

fn weights(path: &Path) -> Vec<(String, Tensor)> {
    let mut w: Vec<_> = Tensor::load_multi(path)
        .unwrap()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("__tch_scope_"))
        .collect();
    w.sort_by(|a, b| a.0.cmp(&b.0));
    w
}

/// The parent's part of the demo.
pub fn show() {
    let dir = std::env::temp_dir();
    let (whole, stopped) = (
        dir.join("tch-scope-demo-whole.ot"),
        dir.join("tch-scope-demo-stopped.ot"),
    );
    for p in [&whole, &stopped] {
        let _ = std::fs::remove_file(p);
    }
    run(&whole, None);
    let (_, status) = run(&stopped, Some(12));
    let saved = Checkpoint::read(&stopped).unwrap();
    println!(
        "Ctrl-C during step 12 of {STEPS}: the run finished that step, saved {} steps done \
         (last loss {:.4}) and ended {}",
        saved.step,
        saved
            .metrics
            .get("loss")
            .last()
            .copied()
            .unwrap_or(f64::NAN),
        describe(status)
    );
    let (first, status) = run(&stopped, None);
    let same = weights(&whole)
        .iter()
        .zip(&weights(&stopped))
        .all(|((n, a), (m, b))| n == m && a.equal(b));
    println!(
        "resumed at step {first}, finished ({}): weights bitwise equal to a run never stopped: {same}",
        describe(status)
    );
    for p in [&whole, &stopped] {
        let _ = std::fs::remove_file(p);
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(2) => "killed by SIGINT, as Ctrl-C ends a program (a shell reads 130)".into(),
        Some(s) => format!("killed by signal {s}"),
        None => format!("with status {}", status.code().unwrap_or(-1)),
    }
}
