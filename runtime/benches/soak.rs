//! `make soak`: long-uptime figures (a smoke run of each part under `make test`).
//!
//! 1. 8 threads × `SOAK_RUNS` (default 10 000 000) `timed` runs over 100
//!    names, after a warm-up: resident memory must grow less than 1 MiB.
//! 2. 100 000 distinct names made at run time, under the default bound on
//!    names: they count in the row `other`.
//! 3. 100 000 distinct names with rows of their own (the bound raised):
//!    how long `report()` takes.
//!
//! Under `cargo test` (which `make test` runs on every target) each part
//! runs small, as a smoke test: see [`SMOKE_RUNS`].
//!
//! Prints a Markdown report; with `--write PATH` also writes it there
//! (`make soak` writes docs/soak.md). Exits non-zero if the memory check
//! fails.

use std::fmt::Write as _;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use tch_scope::report::{self, Site};
use tch_scope::{Scope, Timed};

const THREADS: usize = 8;
const NAMES: usize = 100;
const DISTINCT: usize = 100_000;
/// Under `cargo test` (no `--bench` argument; `make test` runs every
/// target) a smoke run of every part: this many runs per thread, and
/// `DISTINCT / 50` names. The full soak takes ≈ 45 s unoptimised.
const SMOKE_RUNS: usize = 20_000;

/// How to read the figures (part of the written file).
const NOTES: &str = "\
Reading these figures: on a shared machine the per-run figure (wall time ÷
all threads' runs) is no measure of a `timed` scope's cost; `make bench`
(docs/benchmarks.md) is. The fixed-name part runs on the same threads as
its warm-up (a thread's first runs make its per-name totals and its
allocator arena). A name costs up to ≈ 6 KiB of totals (720 `u64`
buckets) in each thread that runs it: under the bound, the second part's
growth is at most 4096 such rows plus the 100 000 leaked name strings; the
third part's 100 000 rows hold ≈ 580 MiB, which is why the bound's default
is 4096.
";

fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

fn mib(b: i64) -> String {
    format!("{:.2} MiB", b as f64 / (1024.0 * 1024.0))
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// The fixed-name part: `THREADS` threads, each `warm` runs over `sites`,
/// then (resident memory read between) `runs` runs. The same threads do
/// both: a thread's first runs make its totals and its allocator's arena.
/// Returns (warm-up time, run time, RSS after warm-up, RSS after the runs).
fn hammer(
    sites: &'static [&'static Site],
    warm: usize,
    runs: usize,
) -> (Duration, Duration, u64, u64) {
    let gate = Barrier::new(THREADS + 1);
    let work = |k: usize, n: usize| {
        for i in 0..n {
            let site = sites[(i + k) % sites.len()];
            let g = Timed::at(site).enter().unwrap();
            drop(std::hint::black_box(g));
        }
    };
    std::thread::scope(|s| {
        for k in 0..THREADS {
            let gate = &gate;
            s.spawn(move || {
                gate.wait();
                work(k, warm);
                gate.wait();
                gate.wait();
                work(k, runs);
                gate.wait();
                gate.wait();
            });
        }
        let t = Instant::now();
        gate.wait();
        gate.wait();
        let warm_took = t.elapsed();
        let before = rss();
        let t = Instant::now();
        gate.wait();
        gate.wait();
        let took = t.elapsed();
        let after = rss();
        gate.wait();
        (warm_took, took, before, after)
    })
}

fn timed_report() -> (Duration, usize) {
    let t = Instant::now();
    let r = report::report();
    (t.elapsed(), r.timings.len())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out = args
        .iter()
        .position(|a| a == "--write")
        .and_then(|i| args.get(i + 1).cloned());
    // `cargo bench` passes `--bench`; `cargo test --all-targets` does not.
    let smoke = !args.iter().any(|a| a == "--bench");
    let runs: usize = if smoke {
        SMOKE_RUNS
    } else {
        std::env::var("SOAK_RUNS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000_000)
    };
    let distinct = if smoke { DISTINCT / 50 } else { DISTINCT };
    let mut md = String::new();
    let host = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let _ = writeln!(md, "# Soak (`make soak`)\n");
    let _ = writeln!(
        md,
        "Written by `make soak` (runtime/benches/soak.rs, release build) on {date}: \
         {host}, {cores} cores available to the process. Not part of `make test`.\n"
    );

    // 1. Fixed names.
    let sites: &'static [&'static Site] = Box::leak(
        (0..NAMES)
            .map(|i| Site::named(leak(format!("soak_{i:03}"))))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let warm_runs = (runs / 100).max(NAMES * 10);
    let (warm, took, before, after) = hammer(sites, warm_runs, runs);
    let growth = after as i64 - before as i64;
    let (r100, rows100) = timed_report();
    let total = THREADS * runs;
    let ns = took.as_nanos() as f64 / total as f64;
    let _ = writeln!(
        md,
        "## {THREADS} threads × {runs} `timed` runs over {NAMES} names\n"
    );
    let _ = writeln!(md, "| figure | value |\n|---|---|");
    let _ = writeln!(
        md,
        "| warm-up (the same threads, {warm_runs} runs each) | {warm:.2?} |"
    );
    let _ = writeln!(
        md,
        "| runs | {total} in {took:.2?} ({ns:.1} ns a run, all threads) |"
    );
    let _ = writeln!(
        md,
        "| resident memory after warm-up | {} |",
        mib(before as i64)
    );
    let _ = writeln!(
        md,
        "| resident memory after the runs | {} |",
        mib(after as i64)
    );
    let ok = growth < (1 << 20);
    let _ = writeln!(
        md,
        "| growth over the runs | {} ({}: must be < 1 MiB) |",
        mib(growth),
        if ok { "pass" } else { "FAIL" }
    );
    let _ = writeln!(md, "| `report()` with {rows100} rows | {r100:.2?} |\n");

    // 2. Run-time names under the default bound.
    let limit = report::name_limit();
    let before = rss();
    let t = Instant::now();
    for i in 0..distinct {
        drop(
            Timed::new(leak(format!("soak_runtime_{i}")))
                .enter()
                .unwrap(),
        );
    }
    let took = t.elapsed();
    let after = rss();
    let (rt, rows) = timed_report();
    let other = report::report()
        .timing(report::OTHER)
        .map_or(0, |t| t.count);
    let _ = writeln!(
        md,
        "## {distinct} distinct names made at run time (bound: {limit} names)\n"
    );
    let _ = writeln!(md, "| figure | value |\n|---|---|");
    let _ = writeln!(
        md,
        "| runs (each a new name, a leaked `String`) | {took:.2?} |"
    );
    let _ = writeln!(md, "| rows after | {rows} (runs in `other`: {other}) |");
    let _ = writeln!(
        md,
        "| resident memory growth (the leaked names included) | {} |",
        mib(after as i64 - before as i64)
    );
    let _ = writeln!(md, "| `report()` | {rt:.2?} |\n");

    // 3. 100 000 rows of their own: report() in n log n.
    report::set_name_limit(usize::MAX);
    let t = Instant::now();
    for i in 0..distinct {
        drop(Timed::new(leak(format!("soak_row_{i}"))).enter().unwrap());
    }
    let took = t.elapsed();
    let (rt, rows) = timed_report();
    let _ = writeln!(
        md,
        "## {distinct} more names, each with a row (bound raised)\n"
    );
    let _ = writeln!(md, "| figure | value |\n|---|---|");
    let _ = writeln!(md, "| runs | {took:.2?} |");
    let _ = writeln!(md, "| `report()` with {rows} rows | {rt:.2?} |");
    let _ = writeln!(md, "| resident memory now | {} |\n", mib(rss() as i64));
    let _ = writeln!(
        md,
        "When `report()` grouped names by a linear search (before its hash map), it \
         took 0.30 s with 10 000 names, 3.4 s with 40 000.\n"
    );
    md.push_str(NOTES);

    print!("{md}");
    if let Some(path) = out {
        std::fs::write(&path, &md).unwrap();
        eprintln!("soak: wrote {path}");
    }
    if !ok {
        eprintln!(
            "soak: resident memory grew {} over the fixed-name runs",
            mib(growth)
        );
        std::process::exit(1);
    }
}
