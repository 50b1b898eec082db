//! One span (enter + exit, empty body) in tch-scope and in other span
//! recorders, in one criterion group, so every figure comes from the same
//! machine in the same run (`make bench` writes them into
//! docs/benchmarks.md, "Against other span recorders").
//!
//! Each function reports ns per span: criterion's iterations are spans, run
//! in chunks of [`CHUNK`] under one root, as fastrace's README measures its
//! per-span figure (a root `Span` + 1000 `LocalSpan`s, total ÷ 1000). Each
//! recorder keeps what it records (a no-op sink at the end, where it has
//! one); what a background thread does with it is drained between chunks,
//! outside the timed part, so a long run keeps its memory bounded.
//!
//! tch-scope is measured as a span recorder alone, without its `metrics`
//! feature (this package's default): that one hands every `timed` run to the
//! metrics facade as well, a cost no peer here pays. Hence
//! `--no-default-features --features peers`.
//!
//! Ids (scripts/bench/collect.py reads them by these names):
//! `peers/tch_scope_traced`, `peers/tch_scope_off`, `peers/fastrace`,
//! `peers/puffin_on`, `peers/puffin_off`, `peers/tracing_chrome`.
//!
//! The group `peers_cpu` measures the same spans of tch-scope (traced) and
//! fastrace by the process's CPU time, every thread's, with the recorder's
//! own collection work included (fastrace's, drained by `flush`, is
//! outside the timed part in `peers`): `peers_cpu/tch_scope_traced`,
//! `peers_cpu/fastrace`.
//!
//! The group `metrics` measures that feature's cost per `timed` run, the
//! same bench built twice: without the feature (`metrics/timed_without`,
//! beside the peers) and with it, a Prometheus recorder installed
//! (`cargo bench -p examples --features peers --bench peers -- metrics/`:
//! `metrics/timed_no_recorder` before any recorder is installed,
//! `metrics/timed_prometheus`, and `metrics/prometheus_record`, the
//! recorder's own floor, one value into a histogram handle it made). Built
//! with the feature, the bench runs only that group.

use std::hint::black_box;
use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use criterion::{Bencher, Criterion, criterion_group, criterion_main};
use tch_scope::scoped;

/// Spans per root: fastrace's README figure is 1000 spans under one root.
const CHUNK: u64 = 1000;

/// Times `iters` spans, `CHUNK` at a time: `root` opens the chunk's root
/// (its drop is timed too), `span` is one span, `drain` runs untimed after
/// each chunk.
fn chunked<R, T>(
    b: &mut Bencher<'_>,
    mut root: impl FnMut() -> R,
    mut span: impl FnMut() -> T,
    mut drain: impl FnMut(),
) {
    b.iter_custom(|iters| {
        let mut total = Duration::ZERO;
        let mut left = iters;
        while left > 0 {
            let n = left.min(CHUNK);
            let start = Instant::now();
            let r = root();
            for _ in 0..n {
                black_box(span());
            }
            drop(r);
            total += start.elapsed();
            drain();
            left -= n;
        }
        total
    });
}

/// As [`chunked`], but the process's CPU time over the whole call, every
/// thread's, `drain` included, and `settle` at the end (it must hand the
/// recorder's pending work to its threads and wait for it): what recording
/// the spans costs the machine, wherever the recorder does the work.
fn chunked_cpu<R, T>(
    b: &mut Bencher<'_>,
    mut root: impl FnMut() -> R,
    mut span: impl FnMut() -> T,
    mut drain: impl FnMut(),
    mut settle: impl FnMut(),
) {
    b.iter_custom(|iters| {
        let start = process_cpu();
        let mut left = iters;
        while left > 0 {
            let n = left.min(CHUNK);
            let r = root();
            for _ in 0..n {
                black_box(span());
            }
            drop(r);
            drain();
            left -= n;
        }
        settle();
        process_cpu().saturating_sub(start)
    });
}

/// CPU time of every thread of the process so far.
fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a clock every Linux has, and a timespec to write into.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &raw mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

fn peers(c: &mut Criterion) {
    // With the `metrics` feature only its cost (the group `metrics`): the
    // peers are measured without it.
    if cfg!(feature = "metrics") {
        return;
    }
    let mut g = c.benchmark_group("peers");
    // The timeline recording every span into a bounded ring (it wraps, so
    // the cost is steady), as in runtime/benches/scopes.rs.
    g.bench_function("tch_scope_traced", |b| {
        tch_scope::trace::set_capacity(1 << 16).unwrap();
        tch_scope::trace::start();
        chunked(b, || (), || scoped!(timed => black_box(1)), || ());
        tch_scope::trace::stop();
    });
    g.bench_function("tch_scope_off", |b| {
        tch_scope::report::set_enabled(false);
        chunked(b, || (), || scoped!(timed => black_box(1)), || ());
        tch_scope::report::set_enabled(true);
    });
    fastrace_(&mut g);
    puffin_(&mut g);
    tracing_chrome_(&mut g);
    g.finish();

    let mut g = c.benchmark_group("peers_cpu");
    g.bench_function("tch_scope_traced", |b| {
        tch_scope::trace::set_capacity(1 << 16).unwrap();
        tch_scope::trace::start();
        chunked_cpu(b, || (), || scoped!(timed => black_box(1)), || (), || ());
        tch_scope::trace::stop();
    });
    g.bench_function("fastrace", |b| {
        chunked_cpu(
            b,
            fastrace_root,
            fastrace_span,
            // As in `peers` (left to its collector thread alone at this
            // rate, fastrace's queue spills and a span costs 2-3 times as
            // much CPU), and a flush at the end.
            fastrace_drain(),
            fastrace::flush,
        );
    });
    g.finish();
}

/// fastrace's root of a chunk: a root `Span`, set as the local parent.
fn fastrace_root() -> (fastrace::local::LocalParentGuard, fastrace::Span) {
    use fastrace::collector::SpanContext;
    let root = fastrace::Span::root("root", SpanContext::random());
    let guard = root.set_local_parent();
    (guard, root)
}

/// fastrace's drain between chunks: a flush every 16. Its collector thread
/// wakes when its queue is half full; if it falls behind, the queue spills
/// into an unbounded deque: empty it now and then.
fn fastrace_drain() -> impl FnMut() {
    let mut chunks = 0u32;
    move || {
        chunks += 1;
        if chunks.is_multiple_of(16) {
            fastrace::flush();
        }
    }
}

/// fastrace's span: a `LocalSpan` under the local parent.
fn fastrace_span() {
    let _s = fastrace::prelude::LocalSpan::enter_with_local_parent("x");
    black_box(1);
}

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// Reporting on (the `enable` feature, a reporter set), the reporter
/// discarding what the collector thread hands it, as fastrace's own benches
/// do.
fn fastrace_(g: &mut Group<'_>) {
    use fastrace::collector::{Config, Reporter, SpanRecord};

    struct Discard;
    impl Reporter for Discard {
        fn report(&mut self, spans: Vec<SpanRecord>) {
            black_box(spans);
        }
    }

    fastrace::set_reporter(Discard, Config::default());
    g.bench_function("fastrace", |b| {
        chunked(b, fastrace_root, fastrace_span, fastrace_drain());
    });
    fastrace::flush();
}

/// `profile_scope!` inside a frame: an outer scope per chunk (so children
/// don't each hand their stream to the global profiler) and
/// `GlobalProfiler::new_frame` after it, which hands the frame to no sink
/// and drops it. Switched off, only the scopes (nothing to collect).
fn puffin_(g: &mut Group<'_>) {
    puffin::set_scopes_on(true);
    g.bench_function("puffin_on", |b| {
        chunked(
            b,
            || puffin::profile_scope_custom!("frame"),
            || {
                puffin::profile_scope!("x");
                black_box(1);
            },
            || puffin::GlobalProfiler::lock().new_frame(),
        );
    });
    puffin::set_scopes_on(false);
    g.bench_function("puffin_off", |b| {
        chunked(
            b,
            || (),
            || {
                puffin::profile_scope!("x");
                black_box(1);
            },
            || (),
        );
    });
}

/// A file writer that keeps the first [`CAP`] bytes and counts the rest,
/// and signals each flush: tracing-chrome's channel to its writer thread is
/// unbounded, so each chunk waits (untimed) until the thread has written
/// all of it.
struct Capped {
    file: std::fs::File,
    written: u64,
    flushes: Arc<(Mutex<u64>, Condvar)>,
}

const CAP: u64 = 64 << 20;

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = usize::try_from(CAP.saturating_sub(self.written)).unwrap_or(usize::MAX);
        self.file.write_all(&buf[..room.min(buf.len())])?;
        self.written += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()?;
        let (n, cv) = &*self.flushes;
        *n.lock().unwrap() += 1;
        cv.notify_all();
        Ok(())
    }
}

/// `tracing::span!(INFO, ..).entered()` with tracing-chrome's layer as the
/// global subscriber, writing under target/ (the first 64 MiB).
fn tracing_chrome_(g: &mut Group<'_>) {
    use tracing_subscriber::layer::SubscriberExt;

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/bench/peers-tracing-chrome.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let flushes = Arc::new((Mutex::new(0u64), Condvar::new()));
    let writer = Capped {
        file: std::fs::File::create(&path).unwrap(),
        written: 0,
        flushes: Arc::clone(&flushes),
    };
    let (layer, guard) = tracing_chrome::ChromeLayerBuilder::new()
        .writer(writer)
        .build();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).unwrap();
    g.bench_function("tracing_chrome", |b| {
        chunked(
            b,
            || (),
            || {
                let _s = tracing::span!(tracing::Level::INFO, "x").entered();
                black_box(1);
            },
            || {
                let (n, cv) = &*flushes;
                let seen = *n.lock().unwrap();
                guard.flush();
                let _done = cv.wait_while(n.lock().unwrap(), |n| *n == seen).unwrap();
            },
        );
    });
    drop(guard);
}

/// One `timed` run, untraced, with or without the `metrics` feature (see
/// the module docs); with it, into a Prometheus recorder's histogram. Timed
/// `CHUNK` at a time like the peers: the recorder keeps every value until
/// its upkeep drains them into the histogram, run between chunks, untimed.
fn metrics(c: &mut Criterion) {
    let mut g = c.benchmark_group("metrics");
    #[cfg(not(feature = "metrics"))]
    g.bench_function("timed_without", |b| {
        chunked(b, || (), || scoped!(timed => black_box(1)), || ());
    });
    #[cfg(feature = "metrics")]
    {
        use metrics_exporter_prometheus::PrometheusBuilder;
        // Before any recorder: the facade's no-op one.
        g.bench_function("timed_no_recorder", |b| {
            chunked(b, || (), || scoped!(timed => black_box(1)), || ());
        });
        let handle = PrometheusBuilder::new()
            .install_recorder()
            .expect("the only recorder of this process");
        g.bench_function("timed_prometheus", |b| {
            chunked(
                b,
                || (),
                || scoped!(timed => black_box(1)),
                || handle.run_upkeep(),
            );
        });
        let h = metrics::histogram!("peers_bench_seconds", "name" => "floor");
        g.bench_function("prometheus_record", |b| {
            chunked(
                b,
                || (),
                || h.record(black_box(3.1e-8)),
                || handle.run_upkeep(),
            );
        });
        // The runs did reach the recorder.
        assert!(
            handle.render().contains("tch_scope_timed_seconds"),
            "no timed runs in the recorder"
        );
    }
    g.finish();
}

criterion_group!(benches, peers, metrics);
criterion_main!(benches);
