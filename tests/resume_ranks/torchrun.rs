//! The driver: two torchrun groups of this binary, one never stopped, one
//! whose rank 1 the test SIGKILLs in the middle of a step.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use tch::Tensor;
use tch_scope::Checkpoint;

use super::worker::{EVERY, STEPS, WORKER_ENV};

/// Every wait of the test is bounded by this.
const DEADLINE: Duration = Duration::from_secs(120);
/// The step in which rank 1 is killed.
const KILL_AT: i64 = 23;

/// The bootstrap venv's torchrun, or why there is none.
fn torchrun() -> Result<PathBuf, String> {
    let torch = concat!(env!("CARGO_MANIFEST_DIR"), "/../.libtorch");
    // Resolved first: the venv is found from the link's target.
    let torch = std::fs::canonicalize(torch).map_err(|e| format!("no {torch}: {e}"))?;
    let bin = torch.join("../../../../bin/torchrun");
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!("no torchrun at {}", bin.display()))
    }
}

fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tch-scope-resume-ranks-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A torchrun group of two ranks of this binary training in `dir`, in a
/// process group of its own (so a test that gives up kills all of it);
/// its output goes to `dir/out`.
fn start(torchrun: &Path, dir: &Path, kill_at: i64) -> Child {
    let out = File::create(dir.join("out")).unwrap();
    Command::new(torchrun)
        .args([
            "--no-python",
            "--standalone",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "3",
            "--monitor-interval",
            "0.1",
        ])
        .arg(std::env::current_exe().unwrap())
        .args([
            "resume_ranks::worker::worker",
            "--ignored",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WORKER_ENV, format!("{} {kill_at}", dir.display()))
        .env("GLOO_SOCKET_IFNAME", "lo")
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0)
        .spawn()
        .unwrap()
}

/// Kills the whole process group of `child` (torchrun and its workers).
fn kill_group(child: &Child) {
    let pgid = i32::try_from(child.id()).unwrap();
    // SAFETY: a plain libc call on a process group this test made.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// Waits for `child` until `until`; past it, kills its group and fails.
fn wait(child: &mut Child, until: Instant, dir: &Path) -> ExitStatus {
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > until {
            kill_group(child);
            let _ = child.wait();
            panic!("torchrun did not end in time:\n{}", output(dir));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn output(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("out")).unwrap_or_default()
}

/// The lines of `out` holding `tag`, from it on (the test harness may
/// print before it on the same line).
fn lines<'a>(out: &'a str, tag: &str) -> Vec<&'a str> {
    out.lines()
        .filter_map(|l| l.find(tag).map(|i| &l[i..]))
        .collect()
}

/// The weights in `path`, by name.
fn weights(path: &Path) -> Vec<(String, Tensor)> {
    let mut w = Tensor::load_multi(path).unwrap();
    w.sort_by(|a, b| a.0.cmp(&b.0));
    w
}

fn same(a: &Path, b: &Path) -> bool {
    let (a, b) = (weights(a), weights(b));
    a.len() == b.len()
        && a.iter()
            .zip(&b)
            .all(|((n, x), (m, y))| n == m && x.equal(y))
}

#[test]
fn a_rank_killed_under_torchrun_resumes_with_the_weights_of_a_run_never_stopped() {
    if !tch_scope::dist::Backend::Gloo.is_available() {
        println!("skipped: tch-scope was built without gloo's headers (scripts/bootstrap-gloo.sh)");
        return;
    }
    let torchrun = match torchrun() {
        Ok(t) => t,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let until = Instant::now() + DEADLINE;
    let (whole, killed) = (folder("whole"), folder("killed"));
    let mut a = start(&torchrun, &whole, -1);
    let mut b = start(&torchrun, &killed, KILL_AT);
    // Rank 1 of the first attempt writes its pid in step KILL_AT.
    let pid_file = killed.join("pid");
    let pid: i32 = loop {
        if let Ok(pid) = std::fs::read_to_string(&pid_file) {
            break pid.trim().parse().unwrap();
        }
        if Instant::now() > until {
            kill_group(&a);
            kill_group(&b);
            panic!("rank 1 never reached step {KILL_AT}:\n{}", output(&killed));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // SAFETY: a plain libc call on the worker that asked for it.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let (sa, sb) = (wait(&mut a, until, &whole), wait(&mut b, until, &killed));
    let (out_a, out_b) = (output(&whole), output(&killed));
    assert!(sa.success(), "the run never stopped failed:\n{out_a}");
    assert!(sb.success(), "the killed run did not finish:\n{out_b}");
    // torchrun started the group again, and both ranks resumed from the
    // same step: the last periodic save (or, were its write cut short,
    // the one before), never the survivor's own exit save at KILL_AT.
    let resumed = lines(&out_b, "RESUMED attempt=1");
    assert_eq!(resumed.len(), 2, "{out_b}");
    let step = |l: &str| -> i64 { l.rsplit_once("step=").unwrap().1.trim().parse().unwrap() };
    let at = step(resumed[0]);
    assert_eq!(at, step(resumed[1]), "the ranks resumed apart:\n{out_b}");
    let last = KILL_AT / EVERY * EVERY;
    assert!(
        at == last || at == last - EVERY,
        "resumed at {at}:\n{out_b}"
    );
    // The survivor had saved its part of step KILL_AT (its failed
    // collective ended the body there), which rank 1 never reached.
    let found = lines(&out_b, "FOUND attempt=1");
    assert_eq!(found.len(), 1, "{out_b}");
    assert!(
        found[0].contains(&format!("run.step{KILL_AT}.rank0.ot")),
        "no part of the survivor at step {KILL_AT}: {}",
        found[0]
    );
    assert_eq!(lines(&out_b, "DONE attempt=1").len(), 2, "{out_b}");
    for rank in 0..2 {
        let f = format!("final.rank{rank}.ot");
        assert!(
            same(&whole.join(&f), &killed.join(&f)),
            "rank {rank}'s final weights differ from the run never stopped"
        );
    }
    assert!(same(
        &whole.join("final.rank0.ot"),
        &whole.join("final.rank1.ot")
    ));
    // Both runs end complete at the last step, and only it is kept.
    for dir in [&whole, &killed] {
        let path = dir.join("run.ot");
        assert_eq!(Checkpoint::complete_step(&path, 2), Some(STEPS));
        let own = Checkpoint::read(Checkpoint::part(&path, STEPS, Some(1))).unwrap();
        assert_eq!(own.step, STEPS);
        assert_eq!(
            own.metrics.get("loss").len(),
            usize::try_from(STEPS).unwrap()
        );
    }
    for dir in [whole, killed] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}
