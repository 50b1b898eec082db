//! One rank of the run: a small MLP with dropout, Adam and a data order
//! shuffled each epoch from the rank's own generator (seeded by rank), its
//! gradients averaged over the group each step, 60 steps, a checkpoint
//! every 5 steps.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tch::nn::{self, Module, ModuleT, VarStore};
use tch::{Device, Kind, Tensor};
use tch_scope::optim::Adam;
use tch_scope::{RunState, dist, log_metric, scoped, steps};

pub const STEPS: i64 = 60;
pub const EVERY: i64 = 5;
/// Rows of each rank's shard, and of a batch.
const ROWS: i64 = 32;
const BATCH: i64 = 8;
pub const WORKER_ENV: &str = "TCH_SCOPE_RANKS_WORKER";

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Order {
    epoch: i64,
    perm: Vec<i64>,
}

fn env_i64(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The chosen rank of the group's first attempt, in the middle of step
/// `at`: writes its pid for the test to SIGKILL it, and waits (bounded) to
/// be killed.
fn wait_to_be_killed(dir: &Path) -> String {
    let pid = dir.join("pid");
    let tmp = dir.join("pid.tmp");
    std::fs::write(&tmp, std::process::id().to_string()).unwrap();
    std::fs::rename(&tmp, &pid).unwrap();
    std::thread::sleep(Duration::from_secs(30));
    "the rank was not killed within 30 s".to_owned()
}

/// Trains in `dir` (resuming from `dir/run.ot`'s parts); rank `victim`
/// of the first attempt waits to be killed in step `kill_at` (-1: never).
fn run(dir: &Path, kill_at: i64, victim: i64) -> Result<(), String> {
    let rank = env_i64("RANK", 0);
    let attempt = env_i64("TORCHELASTIC_RESTART_COUNT", 0);
    if rank == 0 {
        // Before any rank of this attempt can prune: what the last one left.
        let mut found: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("run.step"))
            .collect();
        found.sort();
        println!("FOUND attempt={attempt} {}", found.join(","));
    }
    tch::manual_seed(0);
    tch::set_num_threads(1);
    // The same initial weights on every rank (the same seed), the same data.
    let vs = VarStore::new(Device::Cpu);
    let root = vs.root();
    let l1 = nn::linear(&root / "l1", 8, 32, Default::default());
    let l2 = nn::linear(&root / "l2", 32, 1, Default::default());
    let x = Tensor::randn([2 * ROWS, 8], (Kind::Float, Device::Cpu));
    let y = x
        .sum_dim_intlist([1i64].as_slice(), true, Kind::Float)
        .sin();
    // Each rank its shard, and its own generator for dropout and order.
    let (x, y) = (
        x.narrow(0, rank * ROWS, ROWS),
        y.narrow(0, rank * ROWS, ROWS),
    );
    tch::manual_seed(1000 + rank);
    let opt = Adam::new(&vs, 1e-2).map_err(|e| e.to_string())?;
    let order = RunState::new(Order {
        epoch: -1,
        perm: vec![],
    });
    let path = dir.join("run.ot");
    let timeout = Duration::from_secs(20);
    let trained = scoped!(
        distributed(from_env, timeout = timeout),
        checkpoint(vs, &path, resume, optimizer = opt, every = EVERY, state = order) => {
        let group = dist::current().map_err(|e| e.to_string())?;
        let mut first = true;
        for step in steps(STEPS) {
            if first {
                println!("RESUMED attempt={attempt} rank={rank} step={step}");
                first = false;
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
            if step == kill_at && rank == victim && attempt == 0 {
                return Err(wait_to_be_killed(dir));
            }
            opt.zero_grad();
            loss.backward();
            group.average_gradients(&vs).map_err(|e| e.to_string())?;
            opt.step().map_err(|e| e.to_string())?;
            log_metric("loss", loss.double_value(&[]));
        }
        Ok::<(), String>(())
    });
    trained?;
    vs.save(dir.join(format!("final.rank{rank}.ot")))
        .map_err(|e| e.to_string())?;
    println!("DONE attempt={attempt} rank={rank}");
    Ok(())
}

/// Each rank resumes from a folder of its own, in which rank 0 finds a
/// complete step and rank 1 none: entering the checkpoint must fail on
/// both, saying why.
fn apart(dir: &Path) {
    let rank = env_i64("RANK", 0);
    let own = dir.join(format!("rank{rank}"));
    let vs = VarStore::new(Device::Cpu);
    let _l = nn::linear(vs.root() / "l", 2, 1, Default::default());
    let path = own.join("run.ot");
    let entered = std::panic::catch_unwind(|| {
        scoped!(
            distributed(from_env, timeout = Duration::from_secs(20)),
            checkpoint(vs, &path, resume) => ()
        );
    });
    if let Err(e) = entered {
        let why = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        println!("REFUSED rank={rank} {why}");
        std::process::exit(3);
    }
    println!("ENTERED rank={rank}");
}

/// A rank's side: does what `TCH_SCOPE_RANKS_WORKER` says:
/// `<dir> <kill_at> <victim>`, or `<dir> apart`.
#[test]
#[ignore = "a rank of the torchrun groups the tests start"]
fn worker() {
    let spec = std::env::var(WORKER_ENV).expect("set by the test");
    if let Some(dir) = spec.strip_suffix(" apart") {
        apart(Path::new(dir));
        return;
    }
    let mut parts = spec.rsplitn(3, ' ');
    let victim = parts.next().unwrap().parse().unwrap();
    let kill_at = parts.next().unwrap().parse().unwrap();
    let dir = parts.next().expect("<dir> <kill_at> <victim>");
    if let Err(e) = run(Path::new(dir), kill_at, victim) {
        eprintln!("rank failed: {e}");
        std::process::exit(3);
    }
}
