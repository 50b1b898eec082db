//! A child process for `tests/trace.rs`: `trace-child nested` runs nested
//! `#[timed]` functions, a `record` and a `memory_scope` (the parent sets
//! `TCH_SCOPE_TRACE`, so the trace is written at exit); `trace-child exit`
//! does the same and leaves with `std::process::exit`; `trace-child
//! profile PATH` runs a `profile` scope on the main thread (the parent
//! reads its stderr).

use std::time::Duration;

use tch_scope::{scoped, timed};

#[timed("child::inner")]
fn inner() {
    std::thread::sleep(Duration::from_millis(3));
}

#[timed("child::outer")]
fn outer() {
    inner();
    scoped!(record("child::range") => inner());
    scoped!(memory_scope("child::memory") => drop(vec![1u8; 8 << 20]));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("nested") => outer(),
        Some("exit") => {
            outer();
            std::process::exit(0);
        }
        Some("profile") => {
            let path = args.get(2).expect("trace-child profile PATH");
            scoped!(profile(path) => {
                let a = tch::Tensor::ones([8, 8], (tch::Kind::Float, tch::Device::Cpu));
                let _ = a.matmul(&a);
            });
        }
        other => panic!("trace-child: unknown mode {other:?}"),
    }
}
