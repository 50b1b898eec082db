//! The worker loop: take a batch of requests of one state and shape, run
//! it inside the captured scopes of one of them, split the outputs back,
//! and when a batch fails, run its requests one by one. Every panic in a
//! batch's handling is caught there: no request or option ends a worker.

#![allow(
    clippy::wildcard_imports,
    reason = "the parent's private types, and only those"
)]

use super::*;

impl<M: Servable> Shared<M> {
    pub(super) fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue stays whole if a thread panicked holding the lock
        // (nothing in between leaves it half-changed).
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn count(&self, counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counts a forward as running until the value is dropped.
    pub(super) fn computing(&self) -> Computing<'_> {
        self.computing.fetch_add(1, Ordering::SeqCst);
        Computing(&self.computing)
    }

    /// Test only: ends this worker with a panic outside its per-batch
    /// guard after the batcher's `end_worker_at_batch`-th batch.
    #[cfg(test)]
    fn test_hook_after_batch(&self) {
        let n = self.options.end_worker_at_batch;
        if n > 0 && self.handled.fetch_add(1, Ordering::SeqCst) + 1 == n {
            panic!("test only: a worker ends outside its per-batch guard");
        }
    }

    /// One forward that answered `n` requests with success.
    pub(super) fn executed(&self, n: usize) {
        let c = &self.counts;
        self.count(&c.inferences, n as u64);
        self.count(&c.executions, 1);
        c.largest_batch.fetch_max(n as u64, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::executed(self.options.name, n as u64);
    }
}

/// A worker thread: takes batches from the queue until it is closed and
/// empty.
pub(super) fn work<M: Servable>(shared: &Shared<M>) {
    if shared.options.intra_op_threads > 0 {
        threads::set_this_threads(shared.options.intra_op_threads);
    }
    let mut span = Record::new(shared.options.name);
    let max = shared.options.max_batch;
    let delay = shared.options.max_delay;
    let mut q = shared.lock();
    // Whether this worker waited idle for its next request (else it comes
    // from computing a batch, and what it finds queued came meanwhile).
    let mut rested = true;
    loop {
        while q.requests.is_empty() {
            if q.closed {
                return;
            }
            q.idle += 1;
            if q.gathering > 0 {
                // An idle worker: a batch held for more should go now.
                shared.gather.notify_all();
            }
            q = shared.work.wait(q).unwrap_or_else(PoisonError::into_inner);
            q.idle -= 1;
            rested = true;
        }
        // Requests (more than one) that queued while this worker computed
        // (and, checked below, no other was idle): the batcher is loaded.
        // One request alone may just be the next of a caller answered a
        // moment ago: it is lone, and does not wait.
        let backlog = !rested && q.requests.len() > 1;
        let mut batch = Vec::with_capacity(max.min(q.requests.len()));
        batch.extend(q.requests.pop_front());
        q.take_fitting(&mut batch, max);
        let wait = batch.len() < max
            && !delay.is_zero()
            && batch[0].shape.is_some()
            && q.idle == 0
            && (shared.computing.load(Ordering::SeqCst) > 0 || backlog)
            && !q.closed;
        if wait {
            // A delay past what an `Instant` can hold (`Duration::MAX`)
            // sets no limit of its own: the batch waits to be full.
            let mut until = Instant::now().checked_add(delay);
            if let Some(d) = batch.iter().filter_map(|r| r.deadline).min() {
                until = Some(until.map_or(d, |u| u.min(d)));
            }
            q.gathering += 1;
            if q.gathering > 1 {
                // Another worker holds a batch too: if no forward runs, it
                // should stop waiting (below), and so should this one.
                shared.gather.notify_all();
            }
            loop {
                let now = Instant::now();
                // Two workers holding batches while no forward runs would
                // leave the cores idle, each waiting for requests the other
                // may take: both go.
                let stalled = q.gathering > 1 && shared.computing.load(Ordering::SeqCst) == 0;
                if batch.len() >= max
                    || q.closed
                    || q.idle > 0
                    || stalled
                    || until.is_some_and(|u| now >= u)
                {
                    break;
                }
                q = match until {
                    Some(u) => {
                        let waited = shared.gather.wait_timeout(q, u - now);
                        waited.unwrap_or_else(PoisonError::into_inner).0
                    }
                    None => shared
                        .gather
                        .wait(q)
                        .unwrap_or_else(PoisonError::into_inner),
                };
                q.take_fitting(&mut batch, max);
            }
            q.gathering -= 1;
        }
        if !q.requests.is_empty() && q.idle > 0 {
            // What this batch left (other states, other shapes) for another.
            shared.work.notify_one();
        }
        drop(q);
        handle(shared, &batch, &mut span);
        // Every request is answered by now; dropped here, off the lock.
        drop(batch);
        #[cfg(test)]
        shared.test_hook_after_batch();
        q = shared.lock();
        rested = false;
    }
}

/// Runs one batch with every panic caught: a panic anywhere in its
/// handling (not only in the forward: a metrics recorder, the trace)
/// answers its requests not answered yet [`BatchError::Panicked`], and the
/// worker goes on.
fn handle<M: Servable>(shared: &Shared<M>, batch: &[Request], span: &mut Record) {
    let Err(payload) = catch_unwind(AssertUnwindSafe(|| run_batch(shared, batch, span))) else {
        return;
    };
    let msg = panics::message(&*payload);
    panics::discard(payload);
    let mut failed = 0;
    for r in batch {
        if !r.slot.is_gone() && r.slot.answer(Err(BatchError::Panicked(msg.clone()))) {
            failed += 1;
        }
    }
    shared.count(&shared.counts.failed, failed);
}

/// Removes the expired and cancelled requests, then computes the rest
/// together (or one by one if that fails) and answers each.
fn run_batch<M: Servable>(shared: &Shared<M>, batch: &[Request], span: &mut Record) {
    let now = Instant::now();
    let (mut expired, mut cancelled) = (Vec::new(), 0);
    let mut live = Vec::with_capacity(batch.len());
    for r in batch {
        if r.slot.is_gone() {
            cancelled += 1;
        } else if r.expired(now) {
            expired.push(r);
        } else {
            live.push(r);
        }
    }
    // Counted before they are answered: whoever reads an answer reads
    // the counts too.
    shared.count(&shared.counts.cancelled, cancelled);
    shared.count(&shared.counts.expired, expired.len() as u64);
    #[cfg(feature = "metrics")]
    metrics::dropped(shared.options.name, expired.len() as u64, cancelled);
    for r in expired {
        let waited = now.saturating_duration_since(r.arrived);
        r.slot.answer(Err(BatchError::Expired { waited }));
    }
    if live.is_empty() {
        return;
    }
    #[cfg(feature = "metrics")]
    metrics::batch(
        shared.options.name,
        live.iter()
            .map(|r| now.saturating_duration_since(r.arrived)),
    );
    let _span = crate::trace::is_recording().then(|| {
        for r in &live {
            if let Some(from) = r.flow {
                crate::trace::flow_end(from);
            }
        }
        let Ok(g) = span.enter();
        g
    });
    if let [alone] = live[..] {
        run_alone(shared, alone);
        return;
    }
    match run_together(shared, &live) {
        Ok(outputs) => {
            shared.executed(live.len());
            for (r, out) in live.iter().zip(outputs) {
                r.slot.answer(Ok(out));
            }
        }
        Err(e) => {
            shared.count(&shared.counts.split_batches, 1);
            let now = Instant::now();
            let deadline_passed = matches!(&e, BatchError::Failed(s) if s.is_ended())
                && live.iter().all(|r| r.expired(now));
            for &r in &live {
                if deadline_passed {
                    // The batch ran to its latest deadline: every
                    // request's own run would end as it did.
                    shared.count(&shared.counts.failed, 1);
                    r.slot.answer(Err(e.clone()));
                } else if r.slot.is_gone() {
                    shared.count(&shared.counts.cancelled, 1);
                    #[cfg(feature = "metrics")]
                    metrics::dropped(shared.options.name, 0, 1);
                } else if r.expired(Instant::now()) {
                    // Late for its own run: answered as if still queued.
                    shared.count(&shared.counts.expired, 1);
                    #[cfg(feature = "metrics")]
                    metrics::dropped(shared.options.name, 1, 0);
                    let waited = now.saturating_duration_since(r.arrived);
                    r.slot.answer(Err(BatchError::Expired { waited }));
                } else {
                    run_alone(shared, r);
                }
            }
        }
    }
}

/// The forward of one request, inputs and outputs untouched, in its own
/// context; answers it.
fn run_alone<M: Servable>(shared: &Shared<M>, r: &Request) {
    let computing = shared.computing();
    let answer: Answer = guarded(|| {
        r.ctx
            .run(|| {
                let _inference = inference_unless(r.grad);
                (shared.forward)(shared.served.get_ref(), &r.inputs)
            })
            .and_then(|out| out)
            .map_err(BatchError::Failed)
    });
    drop(computing);
    match answer {
        Ok(_) => shared.executed(1),
        Err(_) => shared.count(&shared.counts.failed, 1),
    }
    r.slot.answer(answer);
}

/// One forward of the requests' inputs concatenated, in the context of the
/// request with the latest deadline; the outputs split back per request.
fn run_together<M: Servable>(
    shared: &Shared<M>,
    live: &[&Request],
) -> Result<Vec<Vec<Tensor>>, BatchError> {
    let rows: Vec<i64> = live.iter().map(|r| r.rows()).collect();
    // `take_fitting` keeps the sum in range; checked all the same, as a
    // failed batch (its requests then run alone), never an overflow.
    let total = rows
        .iter()
        .try_fold(0i64, |n, &r| n.checked_add(r))
        .ok_or_else(|| {
            BatchError::Failed(ScopeError::new(
                "batch",
                None,
                "the batch's rows along dim 0 overflow an i64",
            ))
        })?;
    let lead = live
        .iter()
        .max_by_key(|r| (r.deadline.is_none(), r.deadline))
        .expect("a batch has requests");
    let _computing = shared.computing();
    guarded(|| {
        lead.ctx
            .run(|| {
                // Requests that ask for a graph run alone, never here.
                let _inference = inference_unless(false);
                let failed = |e: tch::TchError| {
                    BatchError::Failed(ScopeError::new("batch", None, e.to_string()))
                };
                let inputs = (0..live[0].inputs.len())
                    .map(|i| {
                        let parts: Vec<&Tensor> = live.iter().map(|r| &r.inputs[i]).collect();
                        Tensor::f_cat(&parts, 0).map_err(failed)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let outputs = (shared.forward)(shared.served.get_ref(), &inputs)
                    .map_err(BatchError::Failed)?;
                let mut each: Vec<Vec<Tensor>> = live
                    .iter()
                    .map(|_| Vec::with_capacity(outputs.len()))
                    .collect();
                for (k, y) in outputs.iter().enumerate() {
                    if y.dim() == 0 || y.size()[0] != total {
                        return Err(BatchError::Failed(ScopeError::new(
                            "batch",
                            None,
                            format!(
                                "output {k} of the batch has shape {:?}, not {total} rows first",
                                y.size()
                            ),
                        )));
                    }
                    let parts = y.f_split_with_sizes(rows.as_slice(), 0).map_err(failed)?;
                    for (mine, part) in each.iter_mut().zip(parts) {
                        mine.push(part);
                    }
                }
                Ok(each)
            })
            .map_err(BatchError::Failed)
            .and_then(|r| r)
    })
}

/// Inference mode on this thread (on top of the entered context) unless
/// the request asked for a graph: the forward of every other request is
/// computed as [`Inference::run`] computes.
fn inference_unless(grad: bool) -> Option<crate::InferenceModeGuard> {
    (!grad).then(|| {
        let Ok(g) = crate::InferenceMode.enter();
        g
    })
}

/// `f`'s value, or its panic as [`BatchError::Panicked`].
fn guarded<T>(f: impl FnOnce() -> Result<T, BatchError>) -> Result<T, BatchError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = panics::message(&*p);
        panics::discard(p);
        Err(BatchError::Panicked(msg))
    })
}
