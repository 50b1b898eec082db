//! A child process for `tests/stop.rs`: `stop-child SCENARIO` opens a stop
//! listener (what a checkpoint opens), prints `listening`, and waits for
//! the parent's signals; each line it prints is a fact the parent checks.
//! `stop-child bench N` times N small operators with and without a
//! listener (run it in release; nothing is asserted on the numbers).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};
use tch_scope::__private::stop;
use tch_scope::{Deadline, log_metric, scoped, stop_requested};

/// Prints a line at once (the parent waits for it).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Waits for a stop, a minute at most (the parent's signal comes first).
fn wait_for_stop() {
    let start = Instant::now();
    while !stop_requested() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits a minute for the parent's signal to end the process.
fn linger() {
    std::thread::sleep(Duration::from_secs(60));
}

/// Runs operators on `w` for a minute (tch's panicking methods).
fn spin(w: &Tensor) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        let _ = w + 1;
    }
}

fn small() -> Tensor {
    Tensor::ones([4], (Kind::Float, Device::Cpu))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        // A loop of the user's own that checks between its steps.
        Some("loop") => {
            let listener = stop::listen().unwrap();
            say("listening");
            while !stop_requested() {
                std::thread::sleep(Duration::from_millis(1));
            }
            say("cleanup");
            drop(listener);
            stop::finish_if_stopped();
            say("not ended");
        }
        // The stop comes; the cleanup is slow; a second signal ends it.
        Some("second") => {
            let listener = stop::listen().unwrap();
            say("listening");
            wait_for_stop();
            say("cleaning");
            linger();
            say("cleanup finished");
            drop(listener);
            stop::finish_if_stopped();
        }
        // The last listener ends: the signals do what they did before.
        Some("after") => {
            drop(stop::listen().unwrap());
            let nested = stop::listen().unwrap();
            drop(stop::listen().unwrap());
            drop(nested);
            say("dropped");
            linger();
            say("still alive");
        }
        // Only SIGTERM stops: SIGINT does what it did before.
        Some("only-sigterm") => {
            tch_scope::set_stop_signals(&[libc::SIGTERM]).unwrap();
            let _listener = stop::listen().unwrap();
            say("listening");
            linger();
            say("still alive");
        }
        // SIGINT ignored before (`nohup`, a background job): it stays so.
        Some("ignored") => {
            // SAFETY: sets a disposition before any other thread exists.
            unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
            let listener = stop::listen().unwrap();
            say("listening");
            wait_for_stop();
            say(&format!("stopped by {:?}", tch_scope::stop_signal()));
            drop(listener);
            stop::finish_if_stopped();
        }
        // The application's own handler, registered before the first
        // listener, is called during a stop too.
        Some("app-handler") => {
            let app = Arc::new(AtomicBool::new(false));
            signal_hook::flag::register(libc::SIGTERM, Arc::clone(&app)).unwrap();
            let listener = stop::listen().unwrap();
            say("listening");
            wait_for_stop();
            say(&format!(
                "app handler called: {}",
                app.load(Ordering::SeqCst)
            ));
            drop(listener);
            stop::finish_if_stopped();
        }
        // After the last listener, the application's handler has the
        // signal as before: called, and the process lives on.
        Some("app-after") => {
            let app = Arc::new(AtomicBool::new(false));
            signal_hook::flag::register(libc::SIGTERM, Arc::clone(&app)).unwrap();
            drop(stop::listen().unwrap());
            say("dropped");
            let start = Instant::now();
            while !app.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(1));
            }
            say(&format!(
                "app handler called: {}",
                app.load(Ordering::SeqCst)
            ));
            say(&format!("stop requested: {}", stop_requested()));
        }
        // No loop checks: the next operator is refused with the stop's
        // message, and the cleanup runs.
        Some("operator") => {
            let listener = stop::listen().unwrap();
            let a = small();
            say("listening");
            let start = Instant::now();
            let err = loop {
                match a.f_add(&a) {
                    Ok(_) if start.elapsed() < Duration::from_secs(60) => {}
                    Ok(_) => break "never refused".to_owned(),
                    Err(e) => break e.to_string(),
                }
            };
            say(&format!("refused: {}", err.lines().next().unwrap_or("")));
            // The refusal is lifted for a save, as a checkpoint's exit does.
            let saved = {
                let _deferred = stop::defer();
                a.f_add(&a).is_ok()
            };
            say(&format!("cleanup ran operators: {saved}"));
            drop(listener);
            stop::finish_if_stopped();
        }
        // The same through tch's panicking methods inside a `deadline`:
        // the scope ends with the stop's ScopeError.
        Some("deadline") => {
            let listener = stop::listen().unwrap();
            let a = Tensor::ones([2, 2], (Kind::Float, Device::Cpu));
            say("listening");
            let start = Instant::now();
            let r = Deadline::new(Duration::from_secs(120)).run(|| {
                while start.elapsed() < Duration::from_secs(60) {
                    let _ = a.mm(&a);
                }
            });
            match r {
                Err(e) => say(&format!("scope error: {e}")),
                Ok(()) => say("no error"),
            }
            drop(listener);
            stop::finish_if_stopped();
        }
        // A steps loop defers the refusal: operators run after the stop
        // until the loop looks at `stop_requested`.
        Some("deferred") => {
            let listener = stop::listen().unwrap();
            let a = small();
            let deferred = stop::defer();
            say("listening");
            let start = Instant::now();
            while !stop::refusing() && start.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(1));
            }
            say(&format!("operator after the stop: {}", a.f_add(&a).is_ok()));
            drop(deferred);
            say(&format!(
                "refused without the deferral: {}",
                a.f_add(&a).is_err()
            ));
            drop(listener);
            stop::finish_if_stopped();
        }
        // A checkpoint around a loop of operators that never checks: the
        // next operator is refused, the body unwinds (a panic), the
        // checkpoint saves what was logged, the process ends by the signal.
        Some("checkpoint") => {
            let path = args.get(2).expect("a checkpoint path");
            let vs = VarStore::new(Device::Cpu);
            let w = vs.root().zeros("w", &[4]);
            scoped!(checkpoint(vs, path) => {
                log_metric("before the stop", 1.0);
                say("listening");
                spin(&w);
            });
            say("not stopped");
        }
        // The same with `save_on_failure = false`: the refused body is a
        // failed exit, so the file is left as it was.
        Some("checkpoint-keep") => {
            let path = args.get(2).expect("a checkpoint path");
            let vs = VarStore::new(Device::Cpu);
            let w = vs.root().zeros("w", &[4]);
            scoped!(checkpoint(vs, path, save_on_failure = false) => {
                log_metric("before the stop", 1.0);
                say("listening");
                spin(&w);
            });
        }
        // Two checkpoints, a loop of the user's own that checks: it ends,
        // both save (the inner first), then the process ends.
        Some("checkpoint-nested") => {
            let (outer, inner) = (args.get(2).unwrap(), args.get(3).unwrap());
            let vs = VarStore::new(Device::Cpu);
            let _w = vs.root().zeros("w", &[4]);
            scoped!(checkpoint(vs, outer) => {
                log_metric("outer", 1.0);
                scoped!(checkpoint(vs, inner) => {
                    log_metric("inner", 1.0);
                    say("listening");
                    wait_for_stop();
                    log_metric("stopped", 1.0);
                    say("loop ended");
                });
                say("inner saved");
            });
            say("not stopped");
        }
        Some("bench") => bench(args.get(2).and_then(|n| n.parse().ok()).unwrap_or(200_000)),
        other => panic!("unknown scenario {other:?}"),
    }
}

/// Nanoseconds per in-place `add_` of two 4-float tensors: without a
/// listener, with one (the stop's key on the thread, no stop), and inside
/// a `deadline` (the boxed check every operator pays there); the best of
/// 10 interleaved rounds each, so that a busy machine hurts all alike.
fn bench(n: u32) {
    let mut a = small();
    let b = small();
    let round = |a: &mut Tensor| {
        let t = Instant::now();
        for _ in 0..n {
            let _ = a.f_add_(&b).unwrap();
        }
        t.elapsed().as_secs_f64() * 1e9 / f64::from(n)
    };
    let mut best = [f64::INFINITY; 3];
    for _ in 0..10 {
        best[0] = best[0].min(round(&mut a));
        let listener = stop::listen().unwrap();
        best[1] = best[1].min(round(&mut a));
        drop(listener);
        let deadline = Deadline::new(Duration::from_secs(3600));
        best[2] = best[2].min(deadline.run(|| round(&mut a)).unwrap());
    }
    say(&format!(
        "ns per add_: no listener {:.1}, listener {:.1}, deadline {:.1}",
        best[0], best[1], best[2]
    ));
    // How long the watcher takes to switch the refusal on after a stop
    // (then the stop ends the process, killed by SIGUSR1).
    let listener = stop::listen().unwrap();
    let t = Instant::now();
    // SAFETY: raise(3) of a signal the listener handles.
    unsafe { libc::raise(libc::SIGUSR1) };
    while !stop::refusing() && t.elapsed() < Duration::from_secs(60) {
        std::hint::spin_loop();
    }
    say(&format!(
        "refusal on {:.1} ms after the signal",
        t.elapsed().as_secs_f64() * 1e3
    ));
    drop(listener);
    stop::finish_if_stopped();
}
