//! Child processes for the distributed tests: ranks are this very test
//! binary re-executed on its `distributed::worker` test (or PyTorch's
//! python), each reaped, none outliving its deadline.

use std::io::Read;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Tells a re-executed test binary which scenario to run as a rank.
pub const WORKER_ENV: &str = "TCH_SCOPE_DIST_WORKER";

/// A free port on 127.0.0.1 (the OS picks it; we release it for rank 0).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

/// The environment torchrun would give `rank` of `n`.
pub fn rank_env(rank: usize, n: usize, port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("RANK", rank.to_string()),
        ("LOCAL_RANK", rank.to_string()),
        ("WORLD_SIZE", n.to_string()),
        ("MASTER_ADDR", "127.0.0.1".into()),
        ("MASTER_PORT", port.to_string()),
        // Python's gloo binds where this host's name resolves; keep it local.
        ("GLOO_SOCKET_IFNAME", "lo".into()),
    ]
}

/// This test binary as a rank running `scenario`.
pub fn worker(scenario: &str, rank: usize, n: usize, port: u16) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.args([
        "distributed::worker",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(WORKER_ENV, scenario)
    .envs(rank_env(rank, n, port));
    cmd
}

/// A python with PyTorch: `TCH_SCOPE_PYTHON` (gpu-run.sh sets the
/// machine's), else PyTorch 2.13's from the bootstrap venv, if it is there.
pub fn python() -> Option<PathBuf> {
    if let Some(py) = std::env::var_os("TCH_SCOPE_PYTHON") {
        return Some(py.into());
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let py = cache.join("tch-scope/venv-torch-2.13.0/bin/python");
    py.exists().then_some(py)
}

#[derive(Debug)]
pub struct Outcome {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// What this rank printed after `tag ` on each line that has it (the
    /// test harness may have printed `test … ... ` first on that line).
    pub fn lines(&self, tag: &str) -> Vec<String> {
        let prefix = format!("{tag} ");
        self.stdout
            .lines()
            .filter_map(|l| l.split_once(&prefix).map(|(_, rest)| rest.to_owned()))
            .collect()
    }

    pub fn line(&self, tag: &str) -> String {
        self.lines(tag)
            .pop()
            .unwrap_or_else(|| panic!("no `{tag}` line in:\n{self}"))
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status {:?} after {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.elapsed, self.stdout, self.stderr
        )
    }
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Runs the commands at once and waits for all; any still running at
/// `deadline` is killed (its status is then `None`). Every child is reaped.
pub fn run_all(cmds: Vec<Command>, deadline: Duration) -> Vec<Outcome> {
    let start = Instant::now();
    let mut running: Vec<(Child, JoinHandle<String>, JoinHandle<String>)> = cmds
        .into_iter()
        .map(|mut cmd| {
            let mut child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn a rank");
            let out = drain(child.stdout.take().unwrap());
            let err = drain(child.stderr.take().unwrap());
            (child, out, err)
        })
        .collect();
    let mut done: Vec<Option<(Option<ExitStatus>, Duration)>> = vec![None; running.len()];
    while done.iter().any(Option::is_none) {
        for (i, (child, _, _)) in running.iter_mut().enumerate() {
            if done[i].is_none()
                && let Ok(Some(status)) = child.try_wait()
            {
                done[i] = Some((Some(status), start.elapsed()));
            }
        }
        if start.elapsed() > deadline {
            for (i, (child, _, _)) in running.iter_mut().enumerate() {
                if done[i].is_none() {
                    let _ = child.kill();
                    let _ = child.wait();
                    done[i] = Some((None, start.elapsed()));
                }
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
    running
        .into_iter()
        .zip(done)
        .map(|((_, out, err), d)| {
            let (status, elapsed) = d.unwrap();
            Outcome {
                status,
                stdout: out.join().unwrap_or_default(),
                stderr: err.join().unwrap_or_default(),
                elapsed,
            }
        })
        .collect()
}
