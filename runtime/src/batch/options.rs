//! [`BatchOptions`]: a batcher's settings.

use std::time::Duration;

/// A [`Batcher`](super::Batcher)'s settings: `BatchOptions::new().max_batch(16)`.
#[derive(Debug, Clone)]
pub struct BatchOptions {
    pub(super) max_batch: usize,
    pub(super) max_delay: Duration,
    pub(super) workers: usize,
    /// Each worker's own intra-op thread count (0: libtorch's, unchanged).
    pub(super) intra_op_threads: usize,
    pub(super) max_queue: usize,
    pub(super) name: &'static str,
    /// Test only: the worker that handles the batcher's `n`-th batch then
    /// panics outside its guard (0: never), as a bug would.
    #[cfg(test)]
    pub(super) end_worker_at_batch: u64,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchOptions {
    /// `max_batch` 32, `max_delay` 2 ms, 1 worker with 1 intra-op thread,
    /// no limit on the queue, named `"batch"`.
    pub fn new() -> Self {
        Self {
            max_batch: 32,
            max_delay: Duration::from_millis(2),
            workers: 1,
            intra_op_threads: 1,
            max_queue: usize::MAX,
            name: "batch",
            #[cfg(test)]
            end_worker_at_batch: 0,
        }
    }

    /// At most `n` requests a batch (0 counts as 1). 1 turns batching off:
    /// every request runs alone, its inputs and outputs untouched.
    pub fn max_batch(mut self, n: usize) -> Self {
        self.max_batch = n.max(1);
        self
    }

    /// How long a worker may wait for more requests to join a batch it
    /// holds, when no other worker is idle and the batcher is loaded (see
    /// the [module docs](super)). Zero: never waits. A delay too long for
    /// an [`Instant`](std::time::Instant) to hold (`Duration::MAX`) sets
    /// no limit: such a batch waits until it is full, another worker is
    /// idle, no forward runs while another worker holds a batch too, the
    /// earliest deadline among its requests, or shutdown.
    pub fn max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// How many worker threads compute batches (0 counts as 1).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n.max(1);
        self
    }

    /// libtorch's intra-op threads for each worker's forwards (default 1;
    /// 0 leaves libtorch's count, by default one per core). Set on each
    /// worker's own thread when it starts (OpenMP's and MKL's count of that
    /// thread); the process's value, and every other thread's count, stay
    /// as they are.
    ///
    /// One by default because the workers are the parallelism, and the
    /// threads that feed them (a server's HTTP runtime, its clients) need
    /// the cores too: measured on 2 cores (docs/serving.md), a batched
    /// server whose one worker ran its forwards on libtorch's 2 threads
    /// spent about twice the CPU per request of one on 1 thread (OpenMP's
    /// threads spin while they wait for each other), and with another
    /// program busy on one core it answered a quarter of the requests a
    /// second. More threads a worker pay off for forwards large enough to
    /// split, on cores nothing else needs.
    pub fn intra_op_threads(mut self, n: usize) -> Self {
        self.intra_op_threads = n;
        self
    }

    /// At most `n` requests waiting for a worker (0 counts as 1; the
    /// default is no limit). The cap is exact, however many threads
    /// submit at once: a request that would be the `n + 1`-th waiting is
    /// answered [`BatchError::QueueFull`](super::BatchError::QueueFull) at
    /// once, uncomputed. Requests a worker has taken (computing, or held
    /// for more to join their batch) no longer count.
    pub fn max_queue(mut self, n: usize) -> Self {
        self.max_queue = n.max(1);
        self
    }

    /// The batcher's name: its workers' thread names, its trace span and
    /// its metrics' `name` label.
    pub fn name(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    /// Test only: the worker that handles the batcher's `n`-th batch (1 =
    /// the first) then ends with a panic outside its per-batch guard, as a
    /// bug in the worker loop would.
    #[cfg(test)]
    pub(crate) fn end_worker_at_batch(mut self, n: u64) -> Self {
        self.end_worker_at_batch = n;
        self
    }
}
