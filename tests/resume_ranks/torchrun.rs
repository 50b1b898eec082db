//! The driver: torchrun groups of this binary, one never stopped, others
//! with one rank SIGKILLed by the test in the middle of a step.

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

/// A torchrun group of two ranks of this binary, told `spec` (after its
/// folder), training in `dir`, in a process group of its own (so a test
/// that gives up kills all of it); its output goes to `dir/out`.
fn start(torchrun: &Path, dir: &Path, spec: &str, restarts: u32) -> Child {
    let out = File::create(dir.join("out")).unwrap();
    Command::new(torchrun)
        .args([
            "--no-python",
            "--standalone",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            &restarts.to_string(),
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
        .env(WORKER_ENV, format!("{} {spec}", dir.display()))
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

/// torchrun and Gloo, or why the test is skipped (printed).
fn torchrun_or_skip() -> Option<PathBuf> {
    if !tch_scope::dist::Backend::Gloo.is_available() {
        println!("skipped: tch-scope was built without gloo's headers (scripts/bootstrap-gloo.sh)");
        return None;
    }
    match torchrun() {
        Ok(t) => Some(t),
        Err(why) => {
            println!("skipped: {why}");
            None
        }
    }
}

/// A run whose rank `victim` the test SIGKILLs in step `at`.
struct Killed {
    dir: PathBuf,
    child: Child,
    at: i64,
    victim: i64,
}

impl Killed {
    fn start(torchrun: &Path, at: i64, victim: i64) -> Self {
        let dir = folder(&format!("killed-{victim}-{at}"));
        let child = start(torchrun, &dir, &format!("{at} {victim}"), 3);
        Killed {
            dir,
            child,
            at,
            victim,
        }
    }

    /// Kills the victim once it has written its pid (in step `at`).
    fn kill(&self, until: Instant) -> Result<(), String> {
        let pid_file = self.dir.join("pid");
        let pid: i32 = loop {
            if let Ok(pid) = std::fs::read_to_string(&pid_file) {
                break pid.trim().parse().unwrap();
            }
            if Instant::now() > until {
                return Err(format!(
                    "rank {} never reached step {}:\n{}",
                    self.victim,
                    self.at,
                    output(&self.dir)
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // SAFETY: a plain libc call on the worker that asked for it.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        Ok(())
    }

    /// What the run printed, after checking that its group was restarted
    /// once and both ranks resumed from one step at or before the last
    /// periodic save before `at`; that step.
    fn check(mut self, until: Instant) -> (PathBuf, String, i64) {
        let status = wait(&mut self.child, until, &self.dir);
        let out = output(&self.dir);
        assert!(status.success(), "the killed run did not finish:\n{out}");
        // The survivor ended (no hang: a stop can't end a collective, so
        // its failed all_reduce did), and torchrun started the group
        // again: both ranks resumed from the same step, the last periodic
        // save (or, were its write cut short, the one before).
        let resumed = lines(&out, "RESUMED attempt=1");
        assert_eq!(resumed.len(), 2, "{out}");
        let step = |l: &str| -> i64 { l.rsplit_once("step=").unwrap().1.trim().parse().unwrap() };
        let at = step(resumed[0]);
        assert_eq!(at, step(resumed[1]), "the ranks resumed apart:\n{out}");
        let last = self.at / EVERY * EVERY;
        assert!(
            at == last || at == last - EVERY,
            "killed in step {}, resumed at {at}:\n{out}",
            self.at
        );
        assert_eq!(lines(&out, "DONE attempt=1").len(), 2, "{out}");
        (self.dir, out, at)
    }
}

#[test]
fn a_rank_killed_under_torchrun_resumes_with_the_weights_of_a_run_never_stopped() {
    let Some(torchrun) = torchrun_or_skip() else {
        return;
    };
    let until = Instant::now() + DEADLINE;
    let whole = folder("whole");
    let mut a = start(&torchrun, &whole, "-1 -1", 3);
    // Rank 1 in the middle of step 23, three steps after a save; rank 0
    // (the writer of the shared part) in step 35, just after the save of
    // step 35 went to its background writer.
    let runs = [
        Killed::start(&torchrun, 23, 1),
        Killed::start(&torchrun, 35, 0),
    ];
    for run in &runs {
        if let Err(e) = run.kill(until) {
            kill_group(&a);
            for r in &runs {
                kill_group(&r.child);
            }
            panic!("{e}");
        }
    }
    let status = wait(&mut a, until, &whole);
    assert!(
        status.success(),
        "the run never stopped failed:\n{}",
        output(&whole)
    );
    let [first, second] = runs;
    let (first, out, at) = first.check(until);
    // The survivor, rank 0, saved its part of step 23 (its failed
    // collective ended the body there, and the exit saved), which rank 1
    // never reached: the group resumed from an older step all ranks had.
    let found = lines(&out, "FOUND attempt=1");
    assert_eq!(found.len(), 1, "{out}");
    assert!(
        found[0].contains("run.step23.rank0.ot") && !found[0].contains("run.step23.rank1.ot"),
        "no part of the survivor alone at step 23: {}",
        found[0]
    );
    assert!(at < 23);
    let (second, _, _) = second.check(until);
    for dir in [&first, &second] {
        for rank in 0..2 {
            let f = format!("final.rank{rank}.ot");
            assert!(
                same(&whole.join(&f), &dir.join(&f)),
                "rank {rank}'s final weights in {} differ from the run never stopped",
                dir.display()
            );
        }
    }
    assert!(same(
        &whole.join("final.rank0.ot"),
        &whole.join("final.rank1.ot")
    ));
    // Every run ends complete at the last step, and only it is kept.
    for dir in [&whole, &first, &second] {
        let path = dir.join("run.ot");
        assert_eq!(Checkpoint::complete_step(&path, 2), Some(STEPS));
        let own = Checkpoint::read(Checkpoint::part(&path, STEPS, Some(1))).unwrap();
        assert_eq!(own.step, STEPS);
        assert_eq!(
            own.metrics.get("loss").len(),
            usize::try_from(STEPS).unwrap()
        );
        // Nothing else: the rank that completed step 60 removed the rest.
        let mut left: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("run."))
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "run.step60.ot",
                "run.step60.rank0.ot",
                "run.step60.rank1.ot"
            ],
            "{}",
            dir.display()
        );
        for part in [None, Some(0), Some(1)] {
            assert!(Checkpoint::part(&path, STEPS, part).exists());
        }
    }
    for dir in [whole, first, second] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// Ranks that see different folders can't agree on a step: entering the
/// checkpoint fails on every rank, saying why, rather than resuming each
/// from its own.
#[test]
fn ranks_that_find_different_complete_steps_refuse_to_resume() {
    let Some(torchrun) = torchrun_or_skip() else {
        return;
    };
    let dir = folder("apart");
    for rank in 0..2 {
        std::fs::create_dir_all(dir.join(format!("rank{rank}"))).unwrap();
    }
    // Rank 0's folder holds a complete step 5 (its parts' contents are
    // never read: the ranks disagree first); rank 1's holds nothing.
    for part in [None, Some(0), Some(1)] {
        std::fs::write(Checkpoint::part(dir.join("rank0/run.ot"), 5, part), b"").unwrap();
    }
    let mut child = start(&torchrun, &dir, "apart", 0);
    let status = wait(&mut child, Instant::now() + DEADLINE, &dir);
    let out = output(&dir);
    assert!(!status.success(), "{out}");
    assert!(lines(&out, "ENTERED").is_empty(), "{out}");
    let refused = lines(&out, "REFUSED");
    assert_eq!(refused.len(), 2, "{out}");
    for line in refused {
        assert!(
            line.contains("every rank must see the same folder"),
            "{line}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}
