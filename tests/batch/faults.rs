//! What no request, option or panic may do to a batcher: end its worker,
//! or leave a request waiting for ever.

use std::pin::Pin;
use std::sync::{Arc, Barrier};
use std::task::{Wake, Waker};

use super::*;

/// Rows along dim 0 so many that two requests' rows overflow an `i64`.
const HUGE_ROWS: i64 = 1 << 62;

type Sizes = Arc<Mutex<Vec<Vec<i64>>>>;

/// A batcher over `Affine` whose forward logs each batch's input size,
/// waits at the gate when the batch's first value is `-1` and panics when
/// it is `666`; zero-element inputs are only logged.
fn sizing_batcher(options: BatchOptions) -> (Batcher<WithMode<Affine>>, Arc<Gate>, Sizes) {
    let gate = Arc::new(Gate::default());
    let sizes = Sizes::default();
    let (g, s) = (Arc::clone(&gate), Arc::clone(&sizes));
    let batcher = Batcher::new(affine(), options, move |m, xs| {
        let x = &xs[0];
        s.lock().unwrap().push(x.size());
        let first = (x.numel() > 0).then(|| x.double_value(&[0, 0]));
        if first == Some(-1.0) {
            g.pass();
        }
        if first == Some(666.0) {
            panic!("marker 666");
        }
        Ok(vec![m.forward(x)])
    })
    .unwrap();
    (batcher, gate, sizes)
}

/// Submits a request that holds the (one) worker at the gate, and waits
/// until it is there.
fn hold_sizing(batcher: &Batcher<WithMode<Affine>>, gate: &Gate) -> Ticket {
    let t = scoped!(inference_mode => batcher.submit(vec![rows(1, -1.0)]));
    gate.wait_entered(1);
    t
}

/// A request computed now: the worker still answers, and right, and it
/// has not ended (these tests run one worker).
fn still_answers(batcher: &Batcher<WithMode<Affine>>, v: f64) {
    let y = answer(scoped!(inference_mode => batcher.submit(vec![rows(2, v)]))).unwrap();
    assert!(y[0].equal(&(rows(2, v) * 2 + 1)), "{y:?}");
    assert_eq!(batcher.live_workers(), 1);
}

/// Waits (bounded) until the worker has taken every queued request.
fn wait_taken(batcher: &Batcher<WithMode<Affine>>) {
    let t = Instant::now();
    while batcher.queued() > 0 {
        assert!(t.elapsed() < Duration::from_secs(30), "no worker took them");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn requests_whose_rows_would_overflow_together_run_alone() {
    let (batcher, gate, sizes) = sizing_batcher(BatchOptions::new().workers(1));
    let _open = OpenOnDrop(Arc::clone(&gate));
    let held = hold_sizing(&batcher, &gate);
    // Zero elements each, so cheap; 2^62 rows each, so 2^63 together.
    let huge = || Tensor::zeros([HUGE_ROWS, 0], (Kind::Float, Device::Cpu));
    let a = scoped!(inference_mode => batcher.submit(vec![huge()]));
    let b = scoped!(inference_mode => batcher.submit(vec![huge()]));
    gate.open();
    answer(held).unwrap();
    for t in [a, b] {
        let y = answer(t).unwrap();
        assert_eq!(y[0].size(), [HUGE_ROWS, 0]);
    }
    still_answers(&batcher, 3.0);
    assert_eq!(
        *sizes.lock().unwrap(),
        [
            vec![1, 4],
            vec![HUGE_ROWS, 0],
            vec![HUGE_ROWS, 0],
            vec![2, 4]
        ],
        "the held one, each huge one alone, the later one"
    );
}

#[test]
fn an_unbounded_max_delay_waits_for_a_full_batch_and_the_worker_lives_on() {
    let options = BatchOptions::new()
        .workers(1)
        .max_batch(3)
        .max_delay(Duration::MAX);
    let (batcher, gate, sizes) = sizing_batcher(options);
    let _open = OpenOnDrop(Arc::clone(&gate));
    let held = hold_sizing(&batcher, &gate);
    let a = scoped!(inference_mode => batcher.submit(vec![rows(1, 1.0)]));
    let b = scoped!(inference_mode => batcher.submit(vec![rows(1, 2.0)]));
    gate.open();
    answer(held).unwrap();
    // Two requests queued while it computed: the worker holds them and
    // waits for a third (no limit on the wait but a full batch).
    wait_taken(&batcher);
    let c = scoped!(inference_mode => batcher.submit(vec![rows(1, 3.0)]));
    for (t, v) in [(a, 1.0), (b, 2.0), (c, 3.0)] {
        assert_eq!(answer(t).unwrap()[0].double_value(&[0, 0]), 2.0 * v + 1.0);
    }
    assert_eq!(
        *sizes.lock().unwrap(),
        [vec![1, 4], vec![3, 4]],
        "the held one, then one full batch"
    );
    // A lone request still goes at once (nobody else is computing).
    still_answers(&batcher, 4.0);
}

#[test]
fn a_panicking_forward_in_a_batch_leaves_the_worker_running() {
    let (batcher, gate, sizes) = sizing_batcher(BatchOptions::new().workers(1));
    let _open = OpenOnDrop(Arc::clone(&gate));
    let held = hold_sizing(&batcher, &gate);
    let bad = scoped!(inference_mode => batcher.submit(vec![rows(1, 666.0)]));
    let good = scoped!(inference_mode => batcher.submit(vec![rows(1, 5.0)]));
    gate.open();
    answer(held).unwrap();
    match answer(bad) {
        Err(BatchError::Panicked(m)) => assert_eq!(m, "marker 666"),
        other => panic!("expected the panic, got {other:?}"),
    }
    assert_eq!(answer(good).unwrap()[0].double_value(&[0, 0]), 11.0);
    still_answers(&batcher, 6.0);
    assert_eq!(
        *sizes.lock().unwrap(),
        [vec![1, 4], vec![2, 4], vec![1, 4], vec![1, 4], vec![2, 4]],
        "the held one, the batch that panicked, each alone, the later one"
    );
}

/// A waker that panics when woken: an executor's bug, met on the worker's
/// thread when it answers.
struct PanickingWaker;

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        panic!("this waker panics");
    }
}

#[test]
fn a_waker_that_panics_does_not_end_the_worker_or_lose_answers() {
    let (batcher, gate, _sizes) = sizing_batcher(BatchOptions::new().workers(1));
    let _open = OpenOnDrop(Arc::clone(&gate));
    let held = hold_sizing(&batcher, &gate);
    let mut polled = scoped!(inference_mode => batcher.submit(vec![rows(1, 1.0)]));
    let waker = Waker::from(Arc::new(PanickingWaker));
    let mut cx = std::task::Context::from_waker(&waker);
    assert!(Pin::new(&mut polled).poll(&mut cx).is_pending());
    let beside = scoped!(inference_mode => batcher.submit(vec![rows(1, 2.0)]));
    gate.open();
    answer(held).unwrap();
    // Answered before the waker panicked, and the one batched beside it.
    assert_eq!(answer(polled).unwrap()[0].double_value(&[0, 0]), 3.0);
    assert_eq!(answer(beside).unwrap()[0].double_value(&[0, 0]), 5.0);
    still_answers(&batcher, 7.0);
}

#[test]
fn the_queue_cap_is_exact_however_many_submit_at_once() {
    const CAP: usize = 4;
    const THREADS: usize = 32;
    let options = BatchOptions::new().workers(1).max_queue(CAP);
    let (batcher, gate, _sizes) = sizing_batcher(options);
    let batcher = Arc::new(batcher);
    let _open = OpenOnDrop(Arc::clone(&gate));
    let held = hold_sizing(&batcher, &gate);
    assert_eq!(batcher.queued(), 0);
    // Every thread submits at the same moment; nothing leaves the queue
    // meanwhile (the worker is held).
    let start = Arc::new(Barrier::new(THREADS));
    let submitters: Vec<_> = (0..THREADS)
        .map(|i| {
            let (batcher, start) = (Arc::clone(&batcher), Arc::clone(&start));
            thread::spawn(move || {
                let x = rows(1, i as f64);
                start.wait();
                let t = scoped!(inference_mode => batcher.submit(vec![x]));
                let queued = batcher.queued();
                // A refused request is answered before `submit` returns.
                let refused = t.is_ready();
                (i, t, refused, queued)
            })
        })
        .collect();
    let mut accepted = Vec::new();
    for h in submitters {
        let (i, t, refused, queued) = h.join().unwrap();
        assert!(
            queued <= CAP,
            "{queued} requests queued, over the cap of {CAP}"
        );
        if refused {
            match t.wait() {
                Err(e @ BatchError::QueueFull { limit: CAP }) => assert_eq!(
                    e.to_string(),
                    "the batch queue is full (4 requests waiting); the request was not computed"
                ),
                other => panic!("request {i}: expected QueueFull, got {other:?}"),
            }
        } else {
            accepted.push((i, t));
        }
    }
    assert_eq!(accepted.len(), CAP, "exactly the cap was queued");
    assert_eq!(batcher.queued(), CAP);
    let s = batcher.stats();
    assert_eq!(
        (s.submitted, s.refused),
        (1 + CAP as u64, (THREADS - CAP) as u64)
    );
    gate.open();
    answer(held).unwrap();
    for (i, t) in accepted {
        let v = i as f64;
        assert_eq!(answer(t).unwrap()[0].double_value(&[0, 0]), 2.0 * v + 1.0);
    }
    // The queue took requests again once the worker took them.
    still_answers(&batcher, 1.0);
}
