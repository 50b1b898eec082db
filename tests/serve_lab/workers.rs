//! What the model's workers share with the routes, whichever runs them
//! (the pool's threads or the batcher's): each worker's [`Phase`]
//! (`/healthz`, `/readyz`), the [`Meeting`] and [`Gate`] of the debug
//! routes, and a thread's libtorch state as `/debug/workers` shows it.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tch::{Device, Kind, TchError, Tensor};
use tch_scope::{is_grad_enabled, is_inference_mode_enabled};
use tokio::sync::watch;

/// How long a debug route waits for the queue or the workers.
pub(crate) const DEBUG_WAIT: Duration = Duration::from_secs(10);

/// Where `n` workers meet, each waiting a bounded time: a worker that
/// never comes (busy, or gone) costs the others a timeout, not a hang.
pub(crate) struct Meeting {
    n: usize,
    /// (workers arrived, cancelled)
    state: Mutex<(usize, bool)>,
    cv: Condvar,
}

impl Meeting {
    pub(crate) fn new(n: usize) -> Self {
        Self {
            n,
            state: Mutex::new((0, false)),
            cv: Condvar::new(),
        }
    }

    /// Whether all `n` came within `timeout` (and nobody cancelled).
    pub(crate) fn arrive(&self, timeout: Duration) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 += 1;
        self.cv.notify_all();
        let (s, _) = self
            .cv
            .wait_timeout_while(s, timeout, |s| s.0 < self.n && !s.1)
            .unwrap_or_else(|p| p.into_inner());
        s.0 >= self.n && !s.1
    }

    /// The route that called the meeting is gone: nobody waits longer.
    pub(crate) fn cancel(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.cv.notify_all();
    }
}

/// Holds the workers that reach it until it opens: `/debug/pause`'s, and
/// the batched server's graveyard of workers that `x-debug-fault: die`
/// ended.
#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<(usize, bool)>, // (workers held, open)
    cv: Condvar,
}

impl Gate {
    pub(crate) fn hold(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 += 1;
        while !s.1 {
            s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    pub(crate) fn held(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    pub(crate) fn open(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.cv.notify_all();
    }
}

/// A worker's state as `/healthz` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    /// Loading: its warm-up forward.
    Starting = 0,
    Idle = 1,
    Busy = 2,
    /// Held by `/debug/pause`.
    Paused = 3,
    /// The thread ended.
    Gone = 4,
}

impl Phase {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Starting,
            1 => Self::Idle,
            2 => Self::Busy,
            3 => Self::Paused,
            _ => Self::Gone,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Idle => "idle",
            Self::Busy => "busy",
            Self::Paused => "paused",
            Self::Gone => "gone",
        }
    }
}

/// One worker's phase, since when, and whether it has run the model.
pub(crate) struct Slot {
    phase: AtomicU8,
    since_ms: AtomicU64,
    pub(crate) warmed: AtomicBool,
}

/// Every worker's [`Slot`], written by the workers (two relaxed stores a
/// job), read by `/healthz` and `/readyz`.
pub(crate) struct Workers {
    epoch: Instant,
    pub(crate) slots: Vec<Slot>,
    /// Counts the workers gone: handlers waiting for a worker watch it, to
    /// answer at once when none is left.
    gone: watch::Sender<usize>,
}

impl Workers {
    pub(crate) fn new(n: usize) -> Self {
        Self {
            epoch: Instant::now(),
            slots: (0..n)
                .map(|_| Slot {
                    phase: AtomicU8::new(Phase::Starting as u8),
                    since_ms: AtomicU64::new(0),
                    warmed: AtomicBool::new(false),
                })
                .collect(),
            gone: watch::Sender::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Sets a worker's phase; `Gone` is for good (a worker marked gone
    /// by its request's handler stays so whatever its thread does next).
    pub(crate) fn set(&self, worker: usize, phase: Phase) {
        let s = &self.slots[worker];
        s.since_ms.store(self.now_ms(), Ordering::Relaxed);
        let gone = Phase::Gone as u8;
        let was = s
            .phase
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |p| {
                (p != gone).then_some(phase as u8)
            });
        if phase == Phase::Gone && was.is_ok() {
            self.gone.send_modify(|n| *n += 1);
        }
    }

    /// Changes each time a worker is marked gone.
    pub(crate) fn subscribe(&self) -> watch::Receiver<usize> {
        self.gone.subscribe()
    }

    pub(crate) fn phase(&self, worker: usize) -> (Phase, Duration) {
        let s = &self.slots[worker];
        let phase = Phase::from_u8(s.phase.load(Ordering::Relaxed));
        let since = s.since_ms.load(Ordering::Relaxed);
        (
            phase,
            Duration::from_millis(self.now_ms().saturating_sub(since)),
        )
    }

    pub(crate) fn live(&self) -> usize {
        (0..self.slots.len())
            .filter(|&i| self.phase(i).0 != Phase::Gone)
            .count()
    }
}

/// A worker thread's libtorch state, as `/debug/workers` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ThreadState {
    grad_mode: bool,
    inference_mode: bool,
    /// The model's modes, one per module in `modules()` order.
    model_training: Vec<bool>,
    /// An operator runs (no deadline left open on the thread).
    ops_ok: bool,
}

/// One worker in `/debug/workers`: its model forwards, and its state at
/// its start and now.
#[derive(Debug, Serialize)]
pub(crate) struct WorkerReport {
    pub(crate) worker: usize,
    pub(crate) jobs: u64,
    pub(crate) at_start: ThreadState,
    pub(crate) now: ThreadState,
}

/// This thread's state, with the model's modes given.
pub(crate) fn state_with(model_training: Vec<bool>) -> Result<ThreadState, TchError> {
    let ops_ok = Tensor::f_zeros([2], (Kind::Float, Device::Cpu))
        .and_then(|t| t.f_add_scalar(1))
        .is_ok();
    Ok(ThreadState {
        grad_mode: is_grad_enabled(),
        inference_mode: is_inference_mode_enabled(),
        model_training,
        ops_ok,
    })
}
