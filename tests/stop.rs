//! Signals end a run cleanly: real child processes (`tests/bin/stop_child.rs`)
//! get real signals while a stop listener (what a checkpoint opens) is
//! alive, and end as the signal would have ended them (killed by it, so a
//! shell reads 128 + the signal's number) after their cleanup ran. Waits
//! are bounded (a minute for each line), nothing is timed.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use tch_scope::Checkpoint;

const WAIT: Duration = Duration::from_secs(60);

/// A running `stop-child SCENARIO` and the lines it printed.
struct Run {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: std::thread::JoinHandle<String>,
}

impl Run {
    fn start(scenario: &str) -> Run {
        Run::with_args(scenario, &[])
    }

    fn with_args(scenario: &str, args: &[&Path]) -> Run {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_stop-child"));
        cmd.arg(scenario).args(args);
        Run::command(cmd)
    }

    fn command(mut cmd: Command) -> Run {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut text);
            text
        });
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Run {
            child,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    /// The next line, which must start with `prefix`.
    fn expect(&mut self, prefix: &str) -> String {
        let line = self.lines.recv_timeout(WAIT).unwrap_or_else(|e| {
            let _ = self.child.kill();
            panic!(
                "no line {prefix:?} from the child ({e}); it printed {:?}",
                self.seen
            )
        });
        self.seen.push(line.clone());
        assert!(
            line.starts_with(prefix),
            "expected {prefix:?}, got {line:?}; before: {:?}",
            self.seen
        );
        line
    }

    fn signal(&self, signal: i32) {
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) of our own child.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Waits for the end (a minute at most) and the lines it printed after
    /// those already expected.
    fn end(self) -> (ExitStatus, Vec<String>) {
        let (status, rest, _) = self.end_with_stderr();
        (status, rest)
    }

    /// [`end`](Self::end), and what the child wrote to stderr.
    fn end_with_stderr(mut self) -> (ExitStatus, Vec<String>, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > WAIT {
                let _ = self.child.kill();
                panic!("the child did not end; it printed {:?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let rest = self.lines.iter().collect();
        let stderr = self.stderr.join().unwrap_or_default();
        (status, rest, stderr)
    }
}

/// The child ended killed by `signal`, as a shell sees `128 + signal`.
fn assert_killed_by(status: ExitStatus, signal: i32, rest: &[String]) {
    assert_eq!(
        status.signal(),
        Some(signal),
        "status {status:?}, expected killed by signal {signal}; then printed {rest:?}"
    );
}

fn stopped_loop(signal: i32, name: &str) {
    let mut run = Run::start("loop");
    run.expect("listening");
    run.signal(signal);
    run.expect("cleanup");
    let (status, rest, stderr) = run.end_with_stderr();
    assert_killed_by(status, signal, &rest);
    assert!(rest.is_empty(), "{rest:?}");
    // The one line that says the signal was heard.
    assert!(
        stderr.contains(&format!("tch-scope: {name}: stopping")),
        "{stderr}"
    );
}

#[test]
fn sigint_ends_the_loop_runs_the_cleanup_and_the_process_dies_by_sigint() {
    stopped_loop(libc::SIGINT, "SIGINT");
}

#[test]
fn sigterm_ends_the_loop_runs_the_cleanup_and_the_process_dies_by_sigterm() {
    stopped_loop(libc::SIGTERM, "SIGTERM");
}

#[test]
fn sigusr1_from_slurm_ends_the_loop_and_the_process_dies_by_sigusr1() {
    stopped_loop(libc::SIGUSR1, "SIGUSR1");
}

#[test]
fn a_second_sigint_during_the_cleanup_ends_the_process_at_once() {
    let mut run = Run::start("second");
    run.expect("listening");
    run.signal(libc::SIGINT);
    run.expect("cleaning");
    run.signal(libc::SIGINT);
    let (status, rest) = run.end();
    assert_killed_by(status, libc::SIGINT, &rest);
    assert!(rest.is_empty(), "the cleanup went on: {rest:?}");
}

#[test]
fn after_the_last_listener_sigterm_kills_as_before() {
    let mut run = Run::start("after");
    run.expect("dropped");
    run.signal(libc::SIGTERM);
    let (status, rest) = run.end();
    assert_killed_by(status, libc::SIGTERM, &rest);
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn a_signal_left_out_of_the_stop_signals_kills_as_before() {
    let mut run = Run::start("only-sigterm");
    run.expect("listening");
    run.signal(libc::SIGINT);
    let (status, rest) = run.end();
    assert_killed_by(status, libc::SIGINT, &rest);
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn a_signal_ignored_before_stays_ignored() {
    let mut run = Run::start("ignored");
    run.expect("listening");
    run.signal(libc::SIGINT);
    run.signal(libc::SIGTERM);
    run.expect(&format!("stopped by Some({})", libc::SIGTERM));
    let (status, rest) = run.end();
    assert_killed_by(status, libc::SIGTERM, &rest);
}

#[test]
fn the_applications_own_handler_is_called_during_a_stop() {
    let mut run = Run::start("app-handler");
    run.expect("listening");
    run.signal(libc::SIGTERM);
    run.expect("app handler called: true");
    let (status, rest) = run.end();
    assert_killed_by(status, libc::SIGTERM, &rest);
}

#[test]
fn after_the_last_listener_the_applications_handler_has_the_signal_again() {
    let mut run = Run::start("app-after");
    run.expect("dropped");
    run.signal(libc::SIGTERM);
    run.expect("app handler called: true");
    run.expect("stop requested: false");
    let (status, rest) = run.end();
    assert_eq!(status.code(), Some(0), "{status:?} {rest:?}");
}

#[test]
fn outside_a_loop_the_next_operator_is_refused_with_the_stops_message() {
    let mut run = Run::start("operator");
    run.expect("listening");
    run.signal(libc::SIGINT);
    let line = run.expect("refused: ");
    // tch's error puts its own words first ("Internal torch error: "). The
    // operator refused is the next one dispatched: `add`, or one `add`
    // dispatches (the allocation of its output) when the stop came between.
    assert!(refused_at_add(&line), "{line}");
    assert!(
        line.contains(
            "the checkpoint saves and the process ends; press Ctrl-C again to end it at once"
        ),
        "{line}"
    );
    run.expect("cleanup ran operators: true");
    let (status, rest) = run.end();
    assert_killed_by(status, libc::SIGINT, &rest);
}

#[test]
fn a_deadline_scope_ends_with_the_stops_scope_error() {
    let mut run = Run::start("deadline");
    run.expect("listening");
    run.signal(libc::SIGTERM);
    let line = run.expect("scope error: ");
    // The first operator of `mm` after the stop (tch's `mm` calls
    // `resolve_conj` too).
    assert!(
        line.starts_with("scope error: stopped by SIGTERM at aten::"),
        "{line}"
    );
    assert!(line.ends_with("a second SIGTERM ends it at once"), "{line}");
    let (status, rest) = run.end();
    assert_killed_by(status, libc::SIGTERM, &rest);
}

#[test]
fn a_deferred_refusal_lets_the_step_finish_its_operators() {
    let mut run = Run::start("deferred");
    run.expect("listening");
    run.signal(libc::SIGINT);
    run.expect("operator after the stop: true");
    run.expect("refused without the deferral: true");
    let (status, rest) = run.end();
    assert_killed_by(status, libc::SIGINT, &rest);
}

/// A fresh path for a checkpoint under the target dir's tmp.
fn temp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stop");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

/// The metric names a checkpoint file holds.
fn logged(path: &Path) -> Vec<String> {
    let saved = Checkpoint::read(path).unwrap();
    saved.metrics.names().map(str::to_owned).collect()
}

#[test]
fn a_checkpoint_refuses_the_next_operator_saves_and_the_process_dies_by_sigint() {
    let path = temp("refused.ot");
    let mut run = Run::with_args("checkpoint", &[&path]);
    run.expect("listening");
    run.signal(libc::SIGINT);
    let (status, rest, stderr) = run.end_with_stderr();
    assert_killed_by(status, libc::SIGINT, &rest);
    assert!(rest.is_empty(), "the body went on: {rest:?}");
    // The body's panic: tch's unwrap of the refused operator's error.
    assert!(refused_at_add(&stderr), "{stderr}");
    assert!(stderr.contains(": the checkpoint saves"), "{stderr}");
    assert_eq!(logged(&path), ["before the stop"]);
}

#[test]
fn a_checkpoint_that_keeps_its_file_on_failure_does_not_save_on_a_stop() {
    let path = temp("kept.ot");
    let mut run = Run::with_args("checkpoint-keep", &[&path]);
    run.expect("listening");
    run.signal(libc::SIGTERM);
    let (status, rest) = run.end();
    assert_killed_by(status, libc::SIGTERM, &rest);
    assert!(
        !path.exists(),
        "a refused body is a failed exit: nothing saved"
    );
}

#[test]
fn nested_checkpoints_both_save_before_the_process_dies_by_sigterm() {
    let (outer, inner) = (temp("outer.ot"), temp("inner.ot"));
    let mut run = Run::with_args("checkpoint-nested", &[&outer, &inner]);
    run.expect("listening");
    run.signal(libc::SIGTERM);
    run.expect("loop ended");
    run.expect("inner saved");
    let (status, rest) = run.end();
    assert_killed_by(status, libc::SIGTERM, &rest);
    assert!(rest.is_empty(), "{rest:?}");
    assert_eq!(logged(&inner), ["inner", "stopped"]);
    assert_eq!(logged(&outer), ["outer"]);
}

/// The bootstrap venv's torchrun (beside its python; `TCH_SCOPE_PYTHON`
/// names another python).
/// Whether `text` says SIGINT refused one of the child's operators: the
/// next one dispatched after the stop, which for its `w + 1` is `add` or
/// one that `add` dispatches (the allocation of its output), whichever
/// the stop came before.
fn refused_at_add(text: &str) -> bool {
    text.match_indices("stopped by SIGINT at aten::")
        .any(|(at, _)| {
            let op = &text[at + "stopped by SIGINT at aten::".len()..];
            op.split(':').next().is_some_and(|name| {
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            })
        })
}

fn torchrun() -> Option<PathBuf> {
    let py = std::env::var_os("TCH_SCOPE_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            let torch = std::fs::canonicalize(concat!(env!("CARGO_MANIFEST_DIR"), "/../.libtorch"));
            torch.ok().map(|t| t.join("../../../../bin/python"))
        })?;
    Some(py.with_file_name("torchrun")).filter(|t| t.exists())
}

#[test]
fn under_torchrun_a_ctrl_c_reaches_the_worker_once_and_its_checkpoint_saves() {
    let Some(torchrun) = torchrun() else {
        eprintln!("skipped: no torchrun (the bootstrap venv, or TCH_SCOPE_PYTHON)");
        return;
    };
    let path = temp("torchrun.ot");
    let mut cmd = Command::new(torchrun);
    cmd.args(["--standalone", "--nproc-per-node=1", "--no-python"])
        .arg(env!("CARGO_BIN_EXE_stop-child"))
        .arg("checkpoint")
        .arg(&path);
    let mut run = Run::command(cmd);
    run.expect("listening");
    // Ctrl-C at a terminal reaches torchrun alone (its workers run in
    // sessions of their own); torchrun sends it on to the worker.
    run.signal(libc::SIGINT);
    let (status, rest, stderr) = run.end_with_stderr();
    assert!(!status.success(), "{status:?}");
    assert!(rest.is_empty(), "the worker's body went on: {rest:?}");
    assert!(stderr.contains("closing signal SIGINT"), "{stderr}");
    assert_eq!(
        stderr.matches("tch-scope: SIGINT: stopping").count(),
        1,
        "one stop, no second signal: {stderr}"
    );
    assert!(refused_at_add(&stderr), "{stderr}");
    assert_eq!(logged(&path), ["before the stop"]);
}
