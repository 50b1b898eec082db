//! The run the kill tests stop and resume: a small MLP with dropout, Adam,
//! and a data order shuffled each epoch (drawn from the generator, kept in
//! the run state so a run resumed mid-epoch has it), 60 steps, a
//! checkpoint every 5 steps.

use std::path::Path;
use std::process::{Command, ExitStatus};

use serde::{Deserialize, Serialize};
use tch::nn::{self, Module, ModuleT, VarStore};
use tch::{Device, Kind, Tensor};
use tch_scope::optim::Adam;
use tch_scope::{RunState, log_metric, scoped, steps};

pub const STEPS: i64 = 60;
pub const EVERY: i64 = 5;
const BATCH: i64 = 16;
const ROWS: i64 = 64;

/// What the child does, from `TCH_SCOPE_RESUME_CHILD`:
/// `<path> <fault> <at> <optimizer>`, fault one of `none`, `kill` (SIGKILL
/// in the middle of step `at`, after its forward pass), `kill-start`
/// (SIGKILL as step `at` begins, right after the boundary that may have
/// started a background save), `panic` (after the optimizer's update of
/// step `at`), `err` (the body returns an `Err` there), `sigint` and
/// `sigterm` (the process signals itself in the middle of step `at`).
pub struct Plan {
    pub path: String,
    pub fault: String,
    pub at: i64,
    /// Whether the checkpoint names the optimizer.
    pub optimizer: bool,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Order {
    epoch: i64,
    perm: Vec<i64>,
}

fn kill_self() -> ! {
    // SAFETY: plain libc calls; SIGKILL can't be caught.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    unreachable!("SIGKILL ends the process")
}

/// Runs the plan: trains (resuming from `path` if it exists).
pub fn run(plan: &Plan) -> Result<(), String> {
    tch::manual_seed(0);
    tch::set_num_threads(1);
    let vs = VarStore::new(Device::Cpu);
    let root = vs.root();
    let l1 = nn::linear(&root / "l1", 8, 32, Default::default());
    let l2 = nn::linear(&root / "l2", 32, 1, Default::default());
    let x = Tensor::randn([ROWS, 8], (Kind::Float, Device::Cpu));
    let y = x
        .sum_dim_intlist([1i64].as_slice(), true, Kind::Float)
        .sin();
    let opt = Adam::new(&vs, 1e-2).map_err(|e| e.to_string())?;
    let order = RunState::new(Order {
        epoch: -1,
        perm: vec![],
    });
    let body = || -> Result<(), String> {
        for step in steps(STEPS) {
            if step == plan.at && plan.fault == "kill-start" {
                // The boundary before step `at` ran (and started the save
                // due there, if one is): the process dies at once.
                kill_self();
            }
            let per_epoch = ROWS / BATCH;
            let epoch = step / per_epoch;
            if order.get().epoch != epoch {
                let perm = Tensor::randperm(ROWS, (Kind::Int64, Device::Cpu));
                let perm = Vec::<i64>::try_from(&perm).map_err(|e| e.to_string())?;
                order.set(Order { epoch, perm });
            }
            let at = usize::try_from((step % per_epoch) * BATCH).unwrap();
            let idx = Tensor::from_slice(&order.get().perm[at..at + BATCH as usize]);
            let (xb, yb) = (x.index_select(0, &idx), y.index_select(0, &idx));
            let h = l1.forward(&xb).relu().dropout(0.3, true);
            let loss = (l2.forward_t(&h, true) - yb).square().mean(Kind::Float);
            if step == plan.at && plan.fault == "kill" {
                kill_self();
            }
            if step == plan.at && (plan.fault == "sigint" || plan.fault == "sigterm") {
                let signal = if plan.fault == "sigint" {
                    libc::SIGINT
                } else {
                    libc::SIGTERM
                };
                // SAFETY: a plain libc call; the checkpoint's handler takes it.
                unsafe {
                    libc::kill(libc::getpid(), signal);
                }
            }
            if step == plan.at && plan.fault == "err" {
                return Err(format!("failed at step {step}"));
            }
            opt.backward_step(&loss).map_err(|e| e.to_string())?;
            log_metric("loss", loss.double_value(&[]));
            if step == plan.at && plan.fault == "panic" {
                panic!("panicked in step {step}, after the update");
            }
        }
        // Reached when the loop ends at a step boundary (its end, or a
        // stop), not when an operator refused by a stop unwinds the body.
        println!("the loop ended at a step boundary");
        Ok(())
    };
    let path = Path::new(&plan.path);
    if plan.optimizer {
        scoped!(checkpoint(vs, path, resume, optimizer = opt, every = EVERY, state = order) => body())
    } else {
        scoped!(checkpoint(vs, path, resume, every = EVERY, state = order) => body())
    }
}

/// Runs this binary's `child` test with `plan`: how it ended, and whether
/// its loop ended at a step boundary.
pub fn spawn(plan: &str) -> (ExitStatus, bool) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "resume::child::child",
            "--nocapture",
        ])
        .env("TCH_SCOPE_RESUME_CHILD", plan)
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    (
        out.status,
        stdout.contains("the loop ended at a step boundary"),
    )
}

/// The weights a checkpoint file holds, by name.
pub fn weights(path: &Path) -> Vec<(String, Tensor)> {
    let mut w: Vec<(String, Tensor)> = Tensor::load_multi(path)
        .unwrap()
        .into_iter()
        .filter(|(n, _)| !n.starts_with("__tch_scope_"))
        .collect();
    w.sort_by(|a, b| a.0.cmp(&b.0));
    w
}

/// Whether two checkpoints hold bitwise the same weights.
pub fn same_weights(a: &Path, b: &Path) -> bool {
    let (a, b) = (weights(a), weights(b));
    a.len() == b.len()
        && a.iter()
            .zip(&b)
            .all(|((n, x), (m, y))| n == m && x.equal(y))
}

/// The child process's side: does what `TCH_SCOPE_RESUME_CHILD` says.
#[test]
#[ignore = "run by the kill tests in a process of its own"]
fn child() {
    let spec = std::env::var("TCH_SCOPE_RESUME_CHILD").expect("set by the parent test");
    let parts: Vec<&str> = spec.split(' ').collect();
    let plan = Plan {
        path: parts[0].to_owned(),
        fault: parts[1].to_owned(),
        at: parts[2].parse().unwrap(),
        optimizer: parts[3] == "opt",
    };
    if let Err(e) = run(&plan) {
        eprintln!("{e}");
        std::process::exit(3);
    }
}
