//! `tch_scope::batch`: dynamic batching over an `Inference`, with real
//! worker threads and real libtorch models (TorchScript's serve_mlp.pt,
//! `tch::nn` modules in `WithMode`, and a model trained here in `Replicas`).
//!
//! Most tests hold the worker on a gate (a forward that waits) while they
//! queue requests, so which requests share a batch is deterministic.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tch::nn::Module;
use tch::{CModule, Device, Kind, Tensor};
use tch_scope::batch::{BatchError, BatchOptions, Batcher, Ticket, cmodule_forward};
use tch_scope::{
    AutocastDevice, Context, Inference, WithMode, autocast_dtype, is_grad_enabled,
    is_inference_mode_enabled, scoped,
};

#[path = "batch/faults.rs"]
mod faults;
#[path = "batch/grad.rs"]
mod grad;
#[path = "batch/rust_trained.rs"]
mod rust_trained;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join(name)
}

fn rows(n: i64, v: f64) -> Tensor {
    Tensor::full([n, 4], v, (Kind::Float, Device::Cpu))
}

/// `2x + 1`: a `Send + Sync` module without weights.
#[derive(Debug)]
struct Affine;

impl Module for Affine {
    fn forward(&self, x: &Tensor) -> Tensor {
        x * 2 + 1
    }
}

fn affine() -> Arc<Inference<WithMode<Affine>>> {
    Arc::new(Inference::new(WithMode::new(Affine)).unwrap())
}

/// Holds the forwards that pass it until it opens.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
    entered: AtomicUsize,
}

impl Gate {
    fn pass(&self) {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }

    /// Waits (bounded) until `n` forwards have reached the gate.
    fn wait_entered(&self, n: usize) {
        let t = Instant::now();
        while self.entered.load(Ordering::SeqCst) < n {
            assert!(t.elapsed() < Duration::from_secs(30), "no forward came");
            thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Opens the gate when dropped, so that a test failing while a worker is
/// held ends (dropping the batcher joins its workers) rather than hangs.
struct OpenOnDrop(Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// What one forward saw: grad mode, inference mode, CPU autocast, and the
/// first value of each request's rows (its marker).
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    grad: bool,
    inference: bool,
    autocast: Option<Kind>,
    markers: Vec<f64>,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// A batcher over `Affine` whose forward logs what it saw, and waits at
/// the gate when its batch holds a row marked `-1`.
fn logging_batcher(options: BatchOptions) -> (Batcher<WithMode<Affine>>, Arc<Gate>, Log) {
    let gate = Arc::new(Gate::default());
    let log = Log::default();
    let (g, l) = (Arc::clone(&gate), Arc::clone(&log));
    let batcher = Batcher::new(affine(), options, move |m, xs| {
        let x = &xs[0];
        let markers: Vec<f64> = (0..x.size()[0]).map(|i| x.double_value(&[i, 0])).collect();
        if markers.contains(&-1.0) {
            g.pass();
        }
        if markers.contains(&666.0) {
            panic!("marker 666");
        }
        l.lock().unwrap().push(Seen {
            grad: is_grad_enabled(),
            inference: is_inference_mode_enabled(),
            autocast: autocast_dtype(AutocastDevice::Cpu),
            markers,
        });
        Ok(vec![m.forward(x)])
    })
    .unwrap();
    (batcher, gate, log)
}

/// Submits a request that holds the (one) worker at the gate, and waits
/// until it is there.
fn hold(batcher: &Batcher<WithMode<Affine>>, gate: &Gate) -> Ticket {
    let t = scoped!(inference_mode => batcher.submit(vec![rows(1, -1.0)]));
    gate.wait_entered(1);
    t
}

/// The ticket's answer, or a failure if none comes within a minute (a
/// worker that ended would leave it waiting for ever).
fn answer(t: Ticket) -> Result<Vec<Tensor>, BatchError> {
    let start = Instant::now();
    while !t.is_ready() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no answer within a minute: no worker is computing"
        );
        thread::sleep(Duration::from_millis(1));
    }
    t.wait()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

#[test]
fn batched_outputs_equal_unbatched_eval_outputs() {
    let served = Arc::new(Inference::new(CModule::load(data("serve_mlp.pt")).unwrap()).unwrap());
    tch::manual_seed(7);
    let inputs: Vec<Tensor> = (0..24i64)
        .map(|i| Tensor::randn([1 + i % 3, 32], (Kind::Float, Device::Cpu)))
        .collect();
    // Each request alone, in eval mode and inference_mode: the reference.
    let expected: Vec<Tensor> = inputs
        .iter()
        .map(|x| served.run(|m| m.forward_ts(&[x]).unwrap()))
        .collect();

    let gate = Arc::new(Gate::default());
    let g = Arc::clone(&gate);
    let options = BatchOptions::new().max_batch(8).workers(1);
    let batcher = Arc::new(
        Batcher::new(Arc::clone(&served), options, move |m, xs| {
            g.pass();
            cmodule_forward(m, xs)
        })
        .unwrap(),
    );

    // Phase 1: 4 threads submit while the worker is held: batches form.
    let answers: Vec<_> = (0..4)
        .map(|t| {
            let batcher = Arc::clone(&batcher);
            let mine: Vec<(usize, Tensor)> = (t * 6..t * 6 + 6)
                .map(|i| (i, inputs[i].shallow_clone()))
                .collect();
            thread::spawn(move || {
                let tickets: Vec<(usize, Ticket)> = mine
                    .into_iter()
                    .map(|(i, x)| (i, scoped!(inference_mode => batcher.submit(vec![x]))))
                    .collect();
                tickets
                    .into_iter()
                    .map(|(i, t)| (i, t.wait().unwrap()))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let t = Instant::now();
    while batcher.stats().submitted < 24 {
        assert!(t.elapsed() < Duration::from_secs(30));
        thread::sleep(Duration::from_millis(1));
    }
    gate.open();
    for h in answers {
        for (i, y) in h.join().unwrap() {
            assert_eq!(y.len(), 1);
            assert_eq!(y[0].size(), expected[i].size());
            let d = max_diff(&y[0], &expected[i]);
            assert!(d <= 1e-6, "request {i}: batched differs by {d}");
        }
    }
    let s = batcher.stats();
    assert_eq!(s.inferences, 24);
    assert_eq!(s.largest_batch, 8, "{s:?}");
    assert!(
        (3..=4).contains(&s.executions),
        "24 requests, one held, then batches of at most 8: {s:?}"
    );

    // Phase 2: the gate open, 4 threads in a closed loop: every answer
    // still equals its request's own.
    let loops: Vec<_> = (0..4)
        .map(|t| {
            let batcher = Arc::clone(&batcher);
            let mine: Vec<(Tensor, Tensor)> = (0..24)
                .filter(|i| i % 4 == t)
                .map(|i| (inputs[i].shallow_clone(), expected[i].shallow_clone()))
                .collect();
            thread::spawn(move || {
                for _ in 0..5 {
                    for (x, want) in &mine {
                        let x = x.shallow_clone();
                        let y = scoped!(inference_mode => batcher.submit(vec![x]))
                            .wait()
                            .unwrap();
                        let d = max_diff(&y[0], want);
                        assert!(d <= 1e-6, "batched under load differs by {d}");
                    }
                }
            })
        })
        .collect();
    for h in loops {
        h.join().unwrap();
    }
    let s = batcher.stats();
    assert_eq!(s.inferences, 24 + 120);
    assert!(s.executions <= s.inferences);
    assert_eq!((s.expired, s.cancelled, s.failed), (0, 0, 0));
}

#[test]
fn a_lone_request_is_not_delayed_by_max_delay() {
    let max_delay = Duration::from_millis(500);
    for workers in [1, 2] {
        let options = BatchOptions::new().max_delay(max_delay).workers(workers);
        let batcher = Batcher::new(affine(), options, |m, xs| Ok(vec![m.forward(&xs[0])])).unwrap();
        batcher.submit(vec![rows(1, 0.0)]).wait().unwrap(); // warm
        for i in 0..5 {
            let t = Instant::now();
            let y = batcher.submit(vec![rows(1, f64::from(i))]).wait().unwrap();
            let took = t.elapsed();
            assert_eq!(y[0].double_value(&[0, 0]), 2.0 * f64::from(i) + 1.0);
            assert!(
                took < max_delay / 5,
                "{workers} worker(s): a lone request took {took:?} (max_delay {max_delay:?})"
            );
        }
    }
}

#[test]
fn a_worker_waits_for_more_only_while_the_others_are_busy() {
    let options = BatchOptions::new()
        .max_batch(2)
        .max_delay(Duration::from_secs(10))
        .workers(2);
    let (batcher, gate, log) = logging_batcher(options);
    let held = hold(&batcher, &gate); // worker A busy
    let t = Instant::now();
    let first = scoped!(inference_mode => batcher.submit(vec![rows(1, 1.0)]));
    thread::sleep(Duration::from_millis(100));
    // Worker B holds it, waiting for a second request: A is busy.
    assert!(!first.is_ready(), "B did not wait although A was busy");
    let second = scoped!(inference_mode => batcher.submit(vec![rows(1, 2.0)]));
    let y1 = first.wait().unwrap();
    let waited = t.elapsed();
    assert!(second.wait().is_ok());
    assert!(waited >= Duration::from_millis(100), "{waited:?}");
    assert!(
        waited < Duration::from_secs(5),
        "the full batch went at once: {waited:?}"
    );
    assert_eq!(y1[0].double_value(&[0, 0]), 3.0);
    gate.open();
    held.wait().unwrap();
    let batches: Vec<Vec<f64>> = log
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.markers.clone())
        .collect();
    assert!(batches.contains(&vec![1.0, 2.0]), "{batches:?}");
}

#[test]
fn mixed_scope_states_never_share_a_batch() {
    let (batcher, gate, log) = logging_batcher(BatchOptions::new().workers(1));
    let held = hold(&batcher, &gate);
    // Interleaved: no_grad (1), inference_mode (2), inference_mode with
    // CPU autocast to bf16 (3).
    let mut tickets = Vec::new();
    for i in 0..12 {
        let marker = f64::from(i % 3 + 1);
        let x = vec![rows(1, marker)];
        let t = match i % 3 {
            0 => scoped!(no_grad => batcher.submit(x)),
            1 => scoped!(inference_mode => batcher.submit(x)),
            _ => scoped!(inference_mode, autocast(cpu, bf16) => batcher.submit(x)),
        };
        tickets.push((marker, t));
    }
    gate.open();
    held.wait().unwrap();
    for (marker, t) in tickets {
        let y = t.wait().unwrap();
        assert_eq!(y[0].double_value(&[0, 0]), 2.0 * marker + 1.0);
    }
    let seen = log.lock().unwrap().clone();
    let sizes: Vec<usize> = seen.iter().map(|s| s.markers.len()).collect();
    assert_eq!(
        sizes,
        [1, 4, 4, 4],
        "the held one, then one batch per state: {seen:?}"
    );
    for s in &seen[1..] {
        let marker = s.markers[0];
        assert!(s.markers.iter().all(|&m| m == marker), "mixed batch: {s:?}");
        // Each state its own batch, and every forward in inference mode
        // (none of these asks for a graph), the no_grad one's too.
        let want = match marker as i64 {
            1 => (false, true, None),
            2 => (false, true, None),
            _ => (false, true, Some(Kind::BFloat16)),
        };
        assert_eq!((s.grad, s.inference, s.autocast), want, "{s:?}");
    }
}

#[test]
fn expired_requests_are_never_computed() {
    let (batcher, gate, log) = logging_batcher(BatchOptions::new().workers(1));
    let held = hold(&batcher, &gate);
    let soon = Instant::now() + Duration::from_millis(50);
    // A deadline given, one captured from a `deadline` scope, and none.
    let given = scoped!(inference_mode => {
        batcher.submit_in(Context::capture(), vec![rows(1, 10.0)], Some(soon))
    });
    let captured = scoped!(inference_mode, deadline(until = soon) => {
        batcher.submit(vec![rows(1, 11.0)])
    });
    let later = Instant::now() + Duration::from_secs(60);
    let in_time = scoped!(inference_mode => {
        batcher.submit_in(Context::capture(), vec![rows(1, 12.0)], Some(later))
    });
    thread::sleep(Duration::from_millis(100));
    gate.open();
    held.wait().unwrap();
    for t in [given, captured] {
        match t.wait() {
            Err(BatchError::Expired { waited }) => assert!(waited >= Duration::from_millis(50)),
            other => panic!("expected Expired, got {other:?}"),
        }
    }
    assert_eq!(in_time.wait().unwrap()[0].double_value(&[0, 0]), 25.0);
    let computed: Vec<f64> = log
        .lock()
        .unwrap()
        .iter()
        .flat_map(|s| s.markers.clone())
        .collect();
    assert_eq!(computed, [-1.0, 12.0], "expired requests were computed");
    let s = batcher.stats();
    assert_eq!((s.expired, s.inferences), (2, 2), "{s:?}");
}

#[test]
fn a_dropped_ticket_is_never_computed() {
    let (batcher, gate, log) = logging_batcher(BatchOptions::new().workers(1));
    let held = hold(&batcher, &gate);
    let gone = scoped!(inference_mode => batcher.submit(vec![rows(1, 7.0)]));
    let kept = scoped!(inference_mode => batcher.submit(vec![rows(1, 8.0)]));
    drop(gone); // the caller goes away
    gate.open();
    held.wait().unwrap();
    assert_eq!(kept.wait().unwrap()[0].double_value(&[0, 0]), 17.0);
    let computed: Vec<f64> = log
        .lock()
        .unwrap()
        .iter()
        .flat_map(|s| s.markers.clone())
        .collect();
    assert_eq!(computed, [-1.0, 8.0], "a cancelled request was computed");
    let s = batcher.stats();
    assert_eq!((s.cancelled, s.inferences), (1, 2), "{s:?}");
}

#[test]
fn a_bad_request_in_a_batch_fails_alone() {
    // Embedding lookups in a table of 10 rows: index 99 is out of range,
    // so libtorch refuses the whole batch's index_select.
    let gate = Arc::new(Gate::default());
    let g = Arc::clone(&gate);
    let executions = Arc::new(Mutex::new(Vec::new()));
    let e = Arc::clone(&executions);
    let batcher = Batcher::new(affine(), BatchOptions::new().workers(1), move |_, xs| {
        let idx = &xs[0];
        let n = idx.size()[0];
        if idx.int64_value(&[0, 0]) < 0 {
            g.pass();
        }
        e.lock().unwrap().push(n);
        let table = Tensor::arange(10, (Kind::Float, Device::Cpu)) * 10;
        let flat = idx.f_flatten(0, -1).unwrap().f_clamp_min(0).unwrap();
        let y = table
            .f_index_select(0, &flat)
            .map_err(|e| tch_scope::ScopeError::new("lookup", None, e.to_string()))?;
        Ok(vec![y.view([n, 2])])
    })
    .unwrap();
    let ids = |a: i64, b: i64| Tensor::from_slice(&[a, b]).view([1, 2]);
    let held = scoped!(inference_mode => batcher.submit(vec![ids(-1, 0)]));
    gate.wait_entered(1);
    let tickets: Vec<Ticket> = [(1, 2), (3, 99), (4, 5)]
        .into_iter()
        .map(|(a, b)| scoped!(inference_mode => batcher.submit(vec![ids(a, b)])))
        .collect();
    gate.open();
    held.wait().unwrap();
    let mut answers = tickets.into_iter().map(Ticket::wait);
    let good = answers.next().unwrap().unwrap();
    assert_eq!(
        Vec::<f32>::try_from(good[0].view([-1])).unwrap(),
        [10.0, 20.0]
    );
    match answers.next().unwrap() {
        Err(BatchError::Failed(e)) => assert!(e.to_string().contains("index"), "{e}"),
        other => panic!("expected the lookup's error, got {other:?}"),
    }
    let good = answers.next().unwrap().unwrap();
    assert_eq!(
        Vec::<f32>::try_from(good[0].view([-1])).unwrap(),
        [40.0, 50.0]
    );
    // The held one; the batch of three (failed); each of them alone.
    assert_eq!(*executions.lock().unwrap(), [1, 3, 1, 1, 1]);
    let s = batcher.stats();
    assert_eq!(
        (s.split_batches, s.failed, s.inferences),
        (1, 1, 3),
        "{s:?}"
    );
}

#[test]
fn a_panicking_request_in_a_batch_fails_alone() {
    let (batcher, gate, _log) = logging_batcher(BatchOptions::new().workers(1));
    let held = hold(&batcher, &gate);
    let x = scoped!(inference_mode => batcher.submit(vec![rows(1, 5.0)]));
    let bad = scoped!(inference_mode => batcher.submit(vec![rows(1, 666.0)]));
    gate.open();
    held.wait().unwrap();
    assert_eq!(x.wait().unwrap()[0].double_value(&[0, 0]), 11.0);
    match bad.wait() {
        Err(BatchError::Panicked(m)) => assert_eq!(m, "marker 666"),
        other => panic!("expected the panic, got {other:?}"),
    }
    // The worker lives on.
    let y = scoped!(inference_mode => batcher.submit(vec![rows(1, 1.0)]))
        .wait()
        .unwrap();
    assert_eq!(y[0].double_value(&[0, 0]), 3.0);
}

#[test]
fn a_request_of_another_shape_runs_apart_and_fails_alone() {
    let served = Arc::new(Inference::new(CModule::load(data("serve_mlp.pt")).unwrap()).unwrap());
    let gate = Arc::new(Gate::default());
    let g = Arc::clone(&gate);
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let s2 = Arc::clone(&sizes);
    let batcher = Batcher::new(served, BatchOptions::new().workers(1), move |m, xs| {
        if xs[0].size()[0] == 5 {
            g.pass();
        }
        s2.lock().unwrap().push(xs[0].size());
        cmodule_forward(m, xs)
    })
    .unwrap();
    let x = |n: i64, d: i64| Tensor::ones([n, d], (Kind::Float, Device::Cpu));
    let held = scoped!(inference_mode => batcher.submit(vec![x(5, 32)]));
    gate.wait_entered(1);
    let a = scoped!(inference_mode => batcher.submit(vec![x(1, 32)]));
    let bad = scoped!(inference_mode => batcher.submit(vec![x(1, 31)]));
    let b = scoped!(inference_mode => batcher.submit(vec![x(2, 32)]));
    gate.open();
    held.wait().unwrap();
    assert_eq!(a.wait().unwrap()[0].size(), [1, 8]);
    assert_eq!(b.wait().unwrap()[0].size(), [2, 8]);
    assert!(matches!(bad.wait(), Err(BatchError::Failed(_))));
    assert_eq!(
        *sizes.lock().unwrap(),
        [vec![5, 32], vec![3, 32], vec![1, 31]],
        "the two of one shape together, the other apart"
    );
    assert_eq!(batcher.stats().split_batches, 0);
}

#[test]
fn several_inputs_and_outputs_are_split_per_request() {
    let gate = Arc::new(Gate::default());
    let g = Arc::clone(&gate);
    let batcher = Batcher::new(affine(), BatchOptions::new().workers(1), move |m, xs| {
        let (x, ids) = (&xs[0], &xs[1]);
        if ids.int64_value(&[0]) < 0 {
            g.pass();
        }
        Ok(vec![
            m.forward(x),
            ids + 100,
            x.sum_dim_intlist(1, false, Kind::Float),
        ])
    })
    .unwrap();
    let ids = |v: &[i64]| Tensor::from_slice(v);
    let held = scoped!(inference_mode => batcher.submit(vec![rows(1, 0.0), ids(&[-1])]));
    gate.wait_entered(1);
    let requests: Vec<(Tensor, Tensor)> = (1..=3)
        .map(|n| {
            let x = Tensor::arange(n * 4, (Kind::Float, Device::Cpu)).view([n, 4]) + 10 * n;
            (x, Tensor::arange(n, (Kind::Int64, Device::Cpu)) + 10 * n)
        })
        .collect();
    let tickets: Vec<Ticket> = requests
        .iter()
        .map(|(x, i)| {
            scoped!(inference_mode => batcher.submit(vec![x.shallow_clone(), i.shallow_clone()]))
        })
        .collect();
    gate.open();
    held.wait().unwrap();
    for ((x, i), t) in requests.iter().zip(tickets) {
        let y = t.wait().unwrap();
        assert_eq!(y.len(), 3);
        assert!(y[0].equal(&(x * 2 + 1)));
        assert!(y[1].equal(&(i + 100)));
        assert!(y[2].equal(&x.sum_dim_intlist(1, false, Kind::Float)));
    }
    let s = batcher.stats();
    assert_eq!((s.executions, s.largest_batch), (2, 3), "{s:?}");
}

#[test]
fn max_batch_one_turns_batching_off() {
    let (batcher, gate, log) = logging_batcher(BatchOptions::new().max_batch(1).workers(1));
    let held = hold(&batcher, &gate);
    let tickets: Vec<Ticket> = (0..5)
        .map(|i| scoped!(inference_mode => batcher.submit(vec![rows(1, f64::from(i))])))
        .collect();
    gate.open();
    held.wait().unwrap();
    for t in tickets {
        t.wait().unwrap();
    }
    assert!(log.lock().unwrap().iter().all(|s| s.markers.len() == 1));
    let s = batcher.stats();
    assert_eq!((s.executions, s.inferences, s.largest_batch), (6, 6, 1));
}

#[test]
fn tickets_can_be_awaited_from_tasks() {
    let batcher = Arc::new(
        Batcher::new(affine(), BatchOptions::new(), |m, xs| {
            Ok(vec![m.forward(&xs[0])])
        })
        .unwrap(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let sums = rt.block_on(async {
        let tasks: Vec<_> = (0..16)
            .map(|i| {
                let batcher = Arc::clone(&batcher);
                tokio::spawn(async move {
                    let t = scoped!(inference_mode => batcher.submit(vec![rows(2, f64::from(i))]));
                    t.await.unwrap()[0].sum(Kind::Double).double_value(&[])
                })
            })
            .collect();
        let mut sums = Vec::new();
        for t in tasks {
            sums.push(t.await.unwrap());
        }
        sums
    });
    for (i, s) in sums.into_iter().enumerate() {
        assert_eq!(s, 8.0 * (2.0 * i as f64 + 1.0));
    }
}

#[test]
fn each_request_draws_a_flow_to_its_batch_in_the_trace() {
    let options = BatchOptions::new().workers(1).name("batch-trace-test");
    let (batcher, gate, _log) = logging_batcher(options);
    tch_scope::trace::start();
    let held = hold(&batcher, &gate);
    let tickets: Vec<Ticket> = (0..3)
        .map(|i| scoped!(inference_mode => batcher.submit(vec![rows(1, f64::from(i))])))
        .collect();
    gate.open();
    held.wait().unwrap();
    for t in tickets {
        t.wait().unwrap();
    }
    drop(batcher); // joins the worker: its spans are written
    tch_scope::trace::stop();
    let path = std::env::temp_dir().join(format!("batch-trace-{}.json", std::process::id()));
    tch_scope::trace::write_chrome(&path).unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let spans = json.matches(r#""name":"batch-trace-test""#).count();
    assert_eq!(spans, 2, "the held batch and the batch of three");
    // Each request's own flow, and the batch's context entry.
    let starts = json.matches(r#""ph":"s""#).count();
    assert!(starts >= 4 + 2, "{starts} flows in {json}");
}
