//! [`App`]: what the routes share. The tch-scope server's requests go to
//! the batcher ([`Batched`]) or to the worker pool's queue; the plain
//! server's to the pool's queue. The debug routes' jobs go the same way.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::{Semaphore, oneshot};

use crate::answers::{ApiError, no_worker, queue_full, queue_stayed_full};
use crate::batched::Batched;
use crate::controls::{Control, ControlTicket};
use crate::debug_headers::Fault;
use crate::pool::{Job, Ticket};
use crate::requests::{Input, Output};
use crate::workers::{Gate, Workers};

pub(crate) struct App {
    /// The batched server's model side (`--max-batch` above 1); `None`:
    /// the worker pool behind `jobs`.
    pub(crate) batched: Option<Batched>,
    pub(crate) jobs: SyncSender<Job>,
    pub(crate) depth: Arc<AtomicUsize>,
    pub(crate) workers: Arc<Workers>,
    pub(crate) queue: usize,
    pub(crate) plain: bool,
    pub(crate) debug: bool,
    pub(crate) body_limit: usize,
    pub(crate) body_timeout: Duration,
    pub(crate) default_deadline: Duration,
    pub(crate) stuck_after: Duration,
    pub(crate) metrics: PrometheusHandle,
    pub(crate) paused: Mutex<Option<Arc<Gate>>>,
    /// One debug route at a time: two checks sharing the workers would
    /// each hold some of them at its meeting.
    pub(crate) debug_turn: tokio::sync::Mutex<()>,
    pub(crate) stopping: AtomicBool,
    pub(crate) requests: AtomicU64,
    pub(crate) connections: Arc<Semaphore>,
    pub(crate) max_connections: u32,
}

impl App {
    pub(crate) fn worker_count(&self) -> usize {
        self.workers.slots.len()
    }

    /// A process-unique id: the pid, then a counter.
    pub(crate) fn request_id(&self) -> String {
        let n = self.requests.fetch_add(1, Ordering::Relaxed);
        format!("{:x}-{n}", std::process::id())
    }

    /// A place in the pool's queue: `depth` counted up only while under
    /// `--queue` (one compare-and-swap: never past it, even for a moment),
    /// given back if the job is not sent.
    fn reserve(&self) -> Option<Place<'_>> {
        self.depth
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                (d < self.queue).then_some(d + 1)
            })
            .ok()
            .map(|_| Place(&self.depth))
    }

    /// Sends `job` in a place of its own: `Err(job)` when the queue is full.
    fn try_enqueue(&self, job: Job) -> Result<Result<(), Job>, ApiError> {
        let Some(place) = self.reserve() else {
            return Ok(Err(job));
        };
        match self.jobs.try_send(job) {
            Ok(()) => {
                // The worker that takes the job gives the place back.
                std::mem::forget(place);
                Ok(Ok(()))
            }
            // Not while `depth` counts every job sent and not yet taken;
            // the place is given back either way.
            Err(TrySendError::Full(job)) => Ok(Err(job)),
            Err(TrySendError::Disconnected(_)) => Err(no_worker()),
        }
    }

    /// Queues a job without waiting: 503 when the queue is full.
    fn enqueue(&self, job: Job) -> Result<(), ApiError> {
        self.try_enqueue(job)?.map_err(|_| queue_full(self.queue))
    }

    /// Queues a job, waiting for a place until `until` (debug routes).
    async fn enqueue_by(&self, mut job: Job, until: Instant) -> Result<(), ApiError> {
        loop {
            match self.try_enqueue(job)? {
                Ok(()) => return Ok(()),
                Err(_) if Instant::now() >= until => return Err(queue_stayed_full()),
                Err(back) => job = back,
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Sends a debug job to the workers: on the pool's queue, or as a
    /// control request to the batcher (its ticket, to keep until taken).
    pub(crate) async fn send_control(
        &self,
        job: Job,
        until: Instant,
    ) -> Result<Option<ControlTicket>, ApiError> {
        let Some(b) = &self.batched else {
            return self.enqueue_by(job, until).await.map(|()| None);
        };
        let op = match job {
            Job::Check { meeting, reply } => Control::Check { meeting, reply },
            Job::Pause(gate) => Control::Pause(gate),
            Job::Predict { .. } => return Err(ApiError::internal("a request is not a control")),
        };
        b.control(op, until).await.map(Some)
    }

    /// Model workers running: the batcher's threads less those the server
    /// knows are gone, or the pool's threads.
    pub(crate) fn live(&self) -> usize {
        match &self.batched {
            Some(b) => b.live(),
            None => self.workers.live(),
        }
    }

    /// Requests waiting for a worker.
    pub(crate) fn queue_depth(&self) -> usize {
        match &self.batched {
            Some(b) => b.engine.queued(),
            None => self.depth.load(Ordering::Relaxed),
        }
    }

    /// Queues the input and waits for a worker's answer.
    pub(crate) async fn run(
        &self,
        ticket: Ticket,
        input: Input,
        fault: Option<Fault>,
    ) -> Result<Output, ApiError> {
        if self.workers.live() == 0 {
            return Err(no_worker());
        }
        let (reply, answer) = oneshot::channel();
        self.enqueue(Job::Predict {
            ticket,
            input,
            fault,
            reply,
        })?;
        // A job is dropped unanswered when its worker ended running it, or
        // when the last worker ended with it queued.
        answer.await.map_err(|_| {
            if self.workers.live() == 0 {
                no_worker()
            } else {
                ApiError::internal("the worker dropped the request")
            }
        })?
    }

    /// From the first signal on: debug routes refuse, and paused workers
    /// go on (a pause must not hold shutdown).
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(gate) = self.paused.lock().unwrap_or_else(|p| p.into_inner()).take() {
            gate.open();
        }
    }
}

/// A job's place under `--queue` in the pool's queue ([`App::reserve`]).
struct Place<'a>(&'a AtomicUsize);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
