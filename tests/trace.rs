//! The timeline (`tch_scope::trace`): a trace written by `write_chrome` and
//! by `TCH_SCOPE_TRACE` at a real child process's exit, read back as JSON;
//! and the silence of the `profile` scope on a CPU machine. The recording
//! is process-wide, so this binary is a process of its own and its tests
//! take turns (`serial`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tch_scope::{scoped, timed, trace};

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tch-scope-trace-{}-{name}", std::process::id()))
}

/// The `"ph": "X"` events of a trace file, and the file's JSON.
fn events(path: &Path) -> (Vec<Value>, Value) {
    let json: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let x = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .cloned()
        .collect();
    (x, json)
}

fn named<'a>(events: &'a [Value], name: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["name"] == name).collect()
}

/// `[ts, ts + dur]` in µs.
fn span(e: &Value) -> (f64, f64) {
    let ts = e["ts"].as_f64().unwrap();
    (ts, ts + e["dur"].as_f64().unwrap())
}

fn inside(inner: &Value, outer: &Value) -> bool {
    let ((a, b), (c, d)) = (span(inner), span(outer));
    inner["tid"] == outer["tid"] && c <= a && b <= d
}

#[timed("trace::leaf")]
fn leaf() {
    std::thread::sleep(Duration::from_millis(5));
}

#[timed("trace::middle")]
fn middle() {
    leaf();
    leaf();
}

#[timed("trace::root")]
fn root() {
    middle();
    scoped!(memory_scope("trace::memory") => drop(vec![1u8; 16 << 20]));
}

#[test]
fn nested_timed_functions_nest_in_the_written_trace() {
    let _s = serial();
    trace::start();
    root();
    let other = std::thread::Builder::new()
        .name("trace-worker".into())
        .spawn(leaf)
        .unwrap();
    other.join().unwrap();
    trace::stop();
    leaf(); // not recorded: after stop
    let path = temp("nested.json");
    trace::write_chrome(&path).unwrap();
    let (x, json) = events(&path);
    std::fs::remove_file(&path).unwrap();

    let root = named(&x, "trace::root");
    let middle = named(&x, "trace::middle");
    let leaves = named(&x, "trace::leaf");
    assert_eq!(
        (root.len(), middle.len(), leaves.len()),
        (1, 1, 3),
        "{x:#?}"
    );
    let (root, middle) = (root[0], middle[0]);
    let (mine, theirs): (Vec<&Value>, Vec<&Value>) = leaves
        .iter()
        .copied()
        .partition(|l| l["tid"] == root["tid"]);
    assert_eq!((mine.len(), theirs.len()), (2, 1));
    assert!(inside(middle, root));
    for l in &mine {
        assert!(inside(l, middle), "{l} not inside {middle}");
    }
    let (a, b) = (span(mine[0]), span(mine[1]));
    assert!(a.1 <= b.0, "the two calls follow each other: {a:?} {b:?}");
    // Durations: each leaf slept 5 ms; the parents hold their children.
    let dur = |e: &Value| e["dur"].as_f64().unwrap();
    for l in &leaves {
        assert!((5_000.0..1_000_000.0).contains(&dur(l)), "{l}");
    }
    assert!(dur(middle) >= dur(mine[0]) + dur(mine[1]));
    assert!(dur(root) >= dur(middle));
    assert_eq!(root["cat"], "timed");
    assert_eq!(root["args"]["outcome"], "completed");

    let memory = named(&x, "trace::memory");
    assert_eq!(memory.len(), 1);
    assert!(inside(memory[0], root));
    assert_eq!(memory[0]["cat"], "memory_scope");
    assert!(memory[0]["args"]["peak_growth"].as_u64().unwrap() >= 15 << 20);

    // Thread names: the worker's own, on its own tid.
    let names: Vec<_> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .collect();
    let worker = names
        .iter()
        .find(|e| e["args"]["name"] == "trace-worker")
        .expect("the worker's thread_name");
    assert_eq!(worker["tid"], theirs[0]["tid"]);
    assert!(names.iter().any(|e| e["tid"] == root["tid"]));
    assert_eq!(json["otherData"]["dropped_spans"], 0);
}

/// Every event of `ph` in a trace file's JSON.
fn phase<'a>(json: &'a Value, ph: &str) -> Vec<&'a Value> {
    json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == ph)
        .collect()
}

#[test]
fn counters_markers_and_flows_are_read_back() {
    use tch::{Device, Kind, Tensor};
    const MIB: i64 = 1 << 20;
    let _s = serial();
    trace::start();
    // Tensor bytes on this thread: outer keeps 1 MiB, inner allocates 2 MiB
    // more and frees them.
    let kept = scoped!(tensor_memory("trace::outer") => {
        let kept = Tensor::zeros([1024, 256], (Kind::Float, Device::Cpu));
        scoped!(tensor_memory("trace::inner") => {
            drop(Tensor::zeros([1024, 512], (Kind::Float, Device::Cpu)));
        });
        kept
    });
    trace::mark("trace::epoch");
    // A context captured inside a span here, entered on a worker that then
    // runs a span of its own.
    let ctx = scoped!(timed("trace::request") => tch_scope::Context::capture());
    let worker = std::thread::Builder::new()
        .name("trace-flow-worker".into())
        .spawn(move || scoped!(with(ctx) => leaf()))
        .unwrap();
    worker.join().unwrap();
    trace::stop();
    trace::mark("trace::not_recorded");
    drop(kept);
    let path = temp("counters.json");
    trace::write_chrome(&path).unwrap();
    let (x, json) = events(&path);
    std::fs::remove_file(&path).unwrap();
    let main_tid = named(&x, "trace::outer")[0]["tid"].clone();

    // Counters: one sample at each memory scope's entry and exit, on the
    // thread's tensor_memory track; in time order they climb 0 → 1 MiB →
    // (inner: 1 MiB → 1 MiB) → 1 MiB relative to the first.
    let mut samples: Vec<(f64, i64)> = phase(&json, "C")
        .into_iter()
        .filter(|e| e["name"] == "tensor_memory bytes")
        .map(|e| {
            assert_eq!(e["id"], main_tid.to_string(), "{e}");
            assert_eq!(e["tid"], main_tid, "{e}");
            (
                e["ts"].as_f64().unwrap(),
                e["args"]["bytes"].as_i64().unwrap(),
            )
        })
        .collect();
    samples.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(samples.len(), 4, "{samples:?}");
    let base = samples[0].1;
    let levels: Vec<i64> = samples.iter().map(|s| s.1 - base).collect();
    assert_eq!(levels, [0, MIB, MIB, MIB], "{samples:?}");
    let inner = named(&x, "trace::inner")[0];
    assert_eq!(inner["args"]["peak_growth"], 2 * MIB);

    // The marker: an instant on this thread's track, once.
    let marks = phase(&json, "i");
    assert_eq!(marks.len(), 1, "{marks:?}");
    assert_eq!(marks[0]["name"], "trace::epoch");
    assert_eq!(marks[0]["s"], "t");
    assert_eq!(marks[0]["tid"], main_tid);

    // The flow: starts on this thread inside the request's span, ends on
    // the worker before its leaf span starts; one id.
    let (starts, ends) = (phase(&json, "s"), phase(&json, "f"));
    assert_eq!((starts.len(), ends.len()), (1, 1), "{starts:?} {ends:?}");
    let (s, f) = (starts[0], ends[0]);
    assert_eq!(s["id"], f["id"]);
    assert_eq!(s["tid"], main_tid);
    let request = named(&x, "trace::request")[0];
    let (a, b) = span(request);
    let at = s["ts"].as_f64().unwrap();
    assert!((a..=b).contains(&at), "{s} inside {request}");
    let leaf = named(&x, "trace::leaf")[0];
    assert_eq!(f["tid"], leaf["tid"]);
    assert_ne!(f["tid"], main_tid);
    assert!(
        f["ts"].as_f64().unwrap() <= span(leaf).0,
        "{f} before {leaf}"
    );
}

#[test]
fn a_full_buffer_drops_the_oldest_and_counts_them() {
    let _s = serial();
    trace::set_capacity(4).unwrap();
    trace::start();
    for _ in 0..10 {
        scoped!(timed("trace::many") => ());
    }
    scoped!(timed("trace::last") => ());
    trace::stop();
    trace::set_capacity(1 << 20).unwrap();
    assert_eq!(trace::dropped(), 7);
    let path = temp("dropped.json");
    trace::write_chrome(&path).unwrap();
    let (x, json) = events(&path);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(x.len(), 4);
    assert_eq!(named(&x, "trace::last").len(), 1, "the newest is kept");
    assert_eq!(json["otherData"]["dropped_spans"], 7);
}

/// A thread's buffer is freed once a write has it, and the
/// process-wide memory limit drops (and counts) the oldest spans.
#[test]
fn an_exited_threads_buffer_is_freed_once_written() {
    let _s = serial();
    trace::start();
    std::thread::Builder::new()
        .name("trace-gone".into())
        .spawn(|| scoped!(timed("trace::gone") => ()))
        .unwrap()
        .join()
        .unwrap();
    // Threads of earlier tests (a runtime's workers) may still be freeing
    // buffers of earlier recordings: figures relative to one chunk only.
    let chunk = 1024 * 64;
    let held = trace::memory_used();
    assert!(held >= chunk, "the exited thread's chunk is held");
    trace::stop();
    let path = temp("gone.json");
    trace::write_chrome(&path).unwrap();
    let (x, _) = events(&path);
    assert_eq!(named(&x, "trace::gone").len(), 1, "written");
    assert!(trace::memory_used() + chunk <= held, "then freed");
    trace::write_chrome(&path).unwrap();
    let (x, _) = events(&path);
    std::fs::remove_file(&path).unwrap();
    assert!(named(&x, "trace::gone").is_empty(), "not in a second write");
    assert_eq!(trace::dropped(), 0, "written spans are not dropped ones");
}

#[test]
fn the_memory_limit_frees_exited_threads_then_wraps_the_oldest() {
    let _s = serial();
    trace::start();
    // A chunk (1024 spans) for this thread, then the limit at what is used.
    for _ in 0..10 {
        scoped!(timed("trace::mine") => ());
    }
    let mine = trace::memory_used();
    std::thread::spawn(|| scoped!(timed("trace::exited") => ()))
        .join()
        .unwrap();
    let chunk = trace::memory_used() - mine;
    trace::set_memory_limit(mine + chunk);
    // A live thread needing a chunk: the exited thread's is freed for it.
    std::thread::spawn(move || {
        scoped!(timed("trace::live") => ());
        assert_eq!(trace::memory_used(), mine + chunk, "never past the limit");
    })
    .join()
    .unwrap();
    assert_eq!(trace::dropped(), 1, "the exited thread's span, counted");
    // This thread past its one chunk: it frees the (now exited) live
    // thread's buffer for a second chunk, then has no room left and wraps.
    for _ in 0..3000 {
        scoped!(timed("trace::mine") => ());
    }
    trace::stop();
    trace::set_memory_limit(512 << 20);
    assert_eq!(trace::memory_used(), mine + chunk);
    assert_eq!(
        trace::dropped(),
        2 + (3010 - 2048),
        "then this thread's oldest"
    );
    let path = temp("limit.json");
    trace::write_chrome(&path).unwrap();
    let (x, json) = events(&path);
    std::fs::remove_file(&path).unwrap();
    assert!(named(&x, "trace::exited").is_empty());
    assert!(named(&x, "trace::live").is_empty());
    assert_eq!(named(&x, "trace::mine").len(), 2048, "the newest kept");
    assert_eq!(json["otherData"]["dropped_spans"], 2 + 3010 - 2048);
}

#[test]
fn a_capacity_over_the_memory_limit_is_refused() {
    let _s = serial();
    let was = trace::capacity();
    trace::set_memory_limit(1 << 20);
    let e = trace::set_capacity(1 << 20).unwrap_err();
    trace::set_memory_limit(512 << 20);
    assert_eq!(e.requested(), 1 << 20);
    assert_eq!(e.max(), (1 << 20) / 64);
    assert!(e.to_string().contains("set_memory_limit"), "{e}");
    assert_eq!(trace::capacity(), was, "unchanged");
    assert!(
        trace::set_capacity(usize::MAX).is_err(),
        "no abort in a Drop later"
    );
}

#[test]
fn a_switched_off_report_records_no_span() {
    let _s = serial();
    trace::start();
    tch_scope::report::set_enabled(false);
    scoped!(timed("trace::off") => ());
    tch_scope::report::set_enabled(true);
    scoped!(timed("trace::on") => ());
    trace::stop();
    let path = temp("off.json");
    trace::write_chrome(&path).unwrap();
    let (x, _) = events(&path);
    std::fs::remove_file(&path).unwrap();
    assert!(named(&x, "trace::off").is_empty());
    assert_eq!(named(&x, "trace::on").len(), 1);
}

fn child() -> Command {
    Command::new(env!("CARGO_BIN_EXE_trace-child"))
}

/// The nesting the child's `outer` makes, read back from its trace.
fn check_child_trace(path: &Path) {
    let (x, _) = events(path);
    let outer = named(&x, "child::outer");
    assert_eq!(outer.len(), 1, "{x:#?}");
    let inner = named(&x, "child::inner");
    assert_eq!(inner.len(), 2);
    let range = named(&x, "child::range");
    assert_eq!((range.len(), range[0]["cat"].as_str()), (1, Some("record")));
    assert!(inside(range[0], outer[0]));
    assert!(inner.iter().all(|i| inside(i, outer[0])));
    assert!(inner.iter().any(|i| inside(i, range[0])));
    assert_eq!(named(&x, "child::memory").len(), 1);
}

#[test]
fn tch_scope_trace_writes_the_file_when_a_child_returns_from_main() {
    let path = temp("env-return.json");
    let out = child()
        .arg("nested")
        .env("TCH_SCOPE_TRACE", &path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    check_child_trace(&path);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn tch_scope_trace_writes_the_file_on_process_exit() {
    let path = temp("env-exit.json");
    let out = child()
        .arg("exit")
        .env("TCH_SCOPE_TRACE", &path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    check_child_trace(&path);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn without_tch_scope_trace_no_file_is_written() {
    let path = temp("env-unset.json");
    let out = child()
        .arg("nested")
        .env_remove("TCH_SCOPE_TRACE")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(!path.exists());
}

/// On a machine without CUDA, libtorch's profiler (Kineto) logs
/// `gpuGetDeviceCount failed with code 35` and two `USDT` lines; the
/// `profile` scope quiets them. (With a GPU the scope leaves Kineto's
/// logging alone, so there is nothing to check there.)
#[test]
fn the_profile_scope_prints_nothing_on_a_cpu_machine() {
    if tch_scope::cuda_device_count() > 0 {
        eprintln!("skipped: a CUDA device is present");
        return;
    }
    let path = temp("profile.json");
    let out = child()
        .arg("profile")
        .arg(&path)
        .env_remove("KINETO_LOG_LEVEL")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("aten::matmul")
    );
    std::fs::remove_file(&path).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr, "", "the profile scope printed to stderr");
}

/// A `tracing` subscriber that writes down, per thread, what a layer such
/// as `tracing-chrome` or `tracing-tree` sees: spans entered and exited, and
/// which span each event happened in.
mod spans {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    #[derive(Default)]
    pub struct Recorder {
        next: AtomicU64,
        /// (id, span name, its `name` field)
        pub spans: Mutex<Vec<(u64, String, String)>>,
        /// "enter <id>", "exit <id>", "event <message> in <id>"
        pub log: Mutex<Vec<String>>,
        stack: Mutex<Vec<u64>>,
    }

    struct Name<'a>(&'a mut String, &'static str);
    impl Visit for Name<'_> {
        fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
            if f.name() == self.1 {
                *self.0 = format!("{v:?}").trim_matches('"').to_owned();
            }
        }
        fn record_str(&mut self, f: &Field, v: &str) {
            if f.name() == self.1 {
                *self.0 = v.to_owned();
            }
        }
    }

    impl Subscriber for Recorder {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, a: &Attributes<'_>) -> Id {
            let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
            let mut name = String::new();
            a.record(&mut Name(&mut name, "name"));
            let span = a.metadata().name().to_owned();
            self.spans.lock().unwrap().push((id, span, name));
            Id::from_u64(id)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, e: &Event<'_>) {
            let mut message = String::new();
            e.record(&mut Name(&mut message, "message"));
            let within = self.stack.lock().unwrap().last().copied().unwrap_or(0);
            self.log
                .lock()
                .unwrap()
                .push(format!("event {message} in {within}"));
        }
        fn enter(&self, id: &Id) {
            self.stack.lock().unwrap().push(id.into_u64());
            self.log
                .lock()
                .unwrap()
                .push(format!("enter {}", id.into_u64()));
        }
        fn exit(&self, id: &Id) {
            self.stack.lock().unwrap().pop();
            self.log
                .lock()
                .unwrap()
                .push(format!("exit {}", id.into_u64()));
        }
    }
}

#[test]
fn with_the_tracing_feature_scopes_are_nested_tracing_spans() {
    let _s = serial();
    let recorder = std::sync::Arc::new(spans::Recorder::default());
    tracing::subscriber::with_default(recorder.clone(), || {
        scoped!(timed("spans::outer"), record("spans::range") => {
            scoped!(memory_scope("spans::memory") => ());
        });
    });
    let spans = recorder.spans.lock().unwrap().clone();
    let id = |name: &str| {
        spans
            .iter()
            .find(|s| s.2 == name)
            .unwrap_or_else(|| panic!("no span named {name}: {spans:?}"))
            .0
    };
    let (outer, range, memory) = (id("spans::outer"), id("spans::range"), id("spans::memory"));
    assert_eq!(
        spans.iter().map(|s| s.1.as_str()).collect::<Vec<_>>(),
        ["timed", "record", "memory_scope"]
    );
    let log = recorder.log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            format!("enter {outer}"),
            format!("enter {range}"),
            format!("enter {memory}"),
            format!("event memory in {memory}"),
            format!("exit {memory}"),
            format!("exit {range}"),
            format!("event timed in {outer}"),
            format!("exit {outer}"),
        ]
    );
}

/// A `timed` span held by a future is entered on each poll and
/// exited before the poll returns, as `tracing::Instrumented` does: an
/// event of another task polled on the same thread meanwhile is outside it.
#[test]
fn a_suspended_future_leaves_its_tracing_span() {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    /// Pending once (and wakes itself), then ready.
    struct Yield(bool);
    impl Future for Yield {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                return Poll::Ready(());
            }
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[tch_scope::timed("spans::async")]
    async fn handler() {
        tracing::info!("before");
        Yield(false).await;
        tracing::info!("after");
    }

    // Other tests here switch measuring and the trace on and off.
    let _s = serial();
    let recorder = std::sync::Arc::new(spans::Recorder::default());
    tracing::subscriber::with_default(recorder.clone(), || {
        let mut cx = Context::from_waker(Waker::noop());
        let mut a = std::pin::pin!(handler());
        assert!(a.as_mut().poll(&mut cx).is_pending());
        // Another task's event on this thread while `a` waits.
        tracing::info!("other");
        assert!(a.as_mut().poll(&mut cx).is_ready());
    });
    let spans = recorder.spans.lock().unwrap().clone();
    let id = spans
        .iter()
        .find(|s| s.2 == "spans::async")
        .unwrap_or_else(|| panic!("no timed span: {spans:?}"))
        .0;
    let log = recorder.log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            format!("enter {id}"),
            format!("event before in {id}"),
            format!("exit {id}"),
            "event other in 0".to_owned(),
            format!("enter {id}"),
            format!("event after in {id}"),
            format!("event timed in {id}"),
            format!("exit {id}"),
        ]
    );
}

/// Marker names minted without end (one per request) are bounded like the
/// report's rows: past the name limit, new names are written as `other`,
/// and the names already known keep theirs. Written to the file streamed,
/// the trace reads back whole.
#[test]
fn run_time_names_are_bounded_and_the_rest_is_other() {
    let _s = serial();
    let limit = tch_scope::report::name_limit();
    trace::start();
    for i in 0..limit + 500 {
        trace::mark(&format!("request-{i}"));
    }
    trace::mark("request-0");
    trace::stop();
    let path = temp("bounded-names.json");
    trace::write_chrome(&path).unwrap();
    let (_, json) = events(&path);
    let marks = phase(&json, "i");
    let names: std::collections::HashSet<&str> =
        marks.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(names.len() <= limit + 1, "{} distinct names", names.len());
    assert!(names.contains("other"), "names past the bound are `other`");
    assert!(names.contains("request-0"));
    let last = marks.last().unwrap();
    assert_eq!(last["name"], "request-0", "a known name keeps its own");
    assert_eq!(marks.len(), limit + 501, "every marker is written");
    std::fs::remove_file(&path).unwrap();
}
