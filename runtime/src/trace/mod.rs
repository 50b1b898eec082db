//! A timeline of every scope: each span of `timed`, `record` and the memory
//! scopes, per thread, written as a Chrome trace that Perfetto
//! (<https://ui.perfetto.dev>) and `chrome://tracing` open.
//!
//! [`start`] begins a recording, [`stop`] ends it, [`write_chrome`] writes
//! what was recorded: one `"ph": "X"` complete event per span (`ts` and
//! `dur` in microseconds, `pid`, `tid` the OS thread id, as libtorch's own
//! profiler writes them), a `thread_name` event per thread, and for memory
//! scopes the bytes at entry, at exit and at the peak. Nested scopes nest.
//!
//! Beside the spans:
//! - **Counter tracks** (`"ph": "C"`), so Perfetto draws bytes over time:
//!   each memory scope adds a sample at its entry and at its exit, to
//!   `memory_scope bytes` (resident bytes of the process),
//!   `gpu_memory_scope bytes` (CUDA bytes allocated) or
//!   `tensor_memory bytes` (one track per thread, `"id"` its thread id:
//!   the net tensor bytes the thread's `tensor_memory` scopes have counted
//!   since its first, so only differences mean something). Samples come
//!   at scope boundaries only: nest scopes where the curve should bend.
//! - **Markers** (`"ph": "i"`) written by [`mark`]: epochs, steps.
//! - **Flows** (`"ph": "s"` / `"f"`, one `id` each): a
//!   [`Context`](crate::Context) captured while recording and entered on
//!   a thread links the span open where it was captured to the next span
//!   that starts where it was entered (a request's handler to its worker).
//!
//! ```
//! use tch_scope::{timed, trace};
//!
//! #[timed]
//! fn inner() {}
//! #[timed]
//! fn outer() { inner(); inner(); }
//!
//! trace::start();
//! outer();
//! trace::stop();
//! let path = std::env::temp_dir().join(format!("doc-trace-{}.json", std::process::id()));
//! trace::write_chrome(&path).unwrap();
//! let json = std::fs::read_to_string(&path).unwrap();
//! assert_eq!(json.matches(r#""ph":"X""#).count(), 3);
//! # std::fs::remove_file(&path).unwrap();
//! ```
//!
//! # Costs and bounds
//! Each thread writes its spans into its own ring buffer, without locks or
//! allocation (past its first span of a recording, and one allocation per
//! 1024 spans until the ring is full); timestamps come from the CPU's
//! time-stamp counter. A thread keeps at most [`capacity`] spans
//! (1 048 576 unless [`set_capacity`] says otherwise, 64 bytes each,
//! allocated as used); past that its oldest are dropped and counted
//! ([`dropped`], and `otherData.dropped_spans` in the file).
//!
//! All threads' buffers together hold at most [`memory_limit`] bytes
//! (512 MiB unless [`set_memory_limit`] says otherwise). A thread that
//! needs more room first frees the buffer of a thread that has exited
//! (oldest first; its spans count as dropped); failing that, its ring
//! stops growing and wraps over its own oldest spans (dropped, counted).
//! The buffer of an exited thread is freed once [`write_chrome`] has
//! written it: a second write no longer holds that thread's spans.
//! [`set_capacity`] refuses a capacity whose buffer alone would pass the
//! limit.
//!
//! # `TCH_SCOPE_TRACE=path`
//! With this variable set (and not empty), recording is on from the first
//! scope the process runs, and the trace is written to `path` when the
//! process exits normally: returning from `main`, or `std::process::exit`.
//! The file is written by a C `atexit` handler, registered when tch-scope
//! first reads the variable (at the first `timed`, `record` or memory
//! scope, or the first call into this module), so it runs before
//! libtorch's own static destructors. A process killed by a signal or
//! aborted writes no trace. A [`start`] or [`stop`] of the program's own
//! still applies; the file holds what was recorded at exit.

mod budget;
mod buffer;
mod chrome;
mod local;
mod marks;
mod names;

use std::ffi::OsString;
use std::path::Path;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use buffer::{Buffer, SLOT_BYTES};
pub(crate) use buffer::{Kind, SpanRecord};
pub(crate) use local::push;
pub use marks::mark;
pub(crate) use marks::{FlowStart, flow_end, flow_start};
pub(crate) use names::intern;

use crate::report::lock;

const UNINIT: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// Bumped by every [`start`]: a thread whose buffer is older makes a new one.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// The clock reading at [`start`]: time zero of the trace.
static EPOCH: AtomicU64 = AtomicU64::new(0);
static CAPACITY: AtomicUsize = AtomicUsize::new(DEFAULT_CAPACITY);
/// Every buffer of the current recording, live threads' and finished ones'
/// (exited threads' until written or freed for room), oldest first.
static BUFFERS: Mutex<Vec<Arc<Buffer>>> = Mutex::new(Vec::new());
/// Spans of the current recording dropped with buffers no longer in
/// `BUFFERS` (freed for room, or written and freed).
static DROPPED_GONE: AtomicU64 = AtomicU64::new(0);

const DEFAULT_CAPACITY: usize = 1 << 20;
/// `TCH_SCOPE_TRACE`, read once.
static ENV_PATH: OnceLock<Option<OsString>> = OnceLock::new();

/// Whether spans are being recorded (the hot path's one check).
#[inline]
pub(crate) fn recording() -> bool {
    match STATE.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => from_env(),
    }
}

/// Reads `TCH_SCOPE_TRACE` once; with a path, starts recording and
/// registers the writer that runs at exit.
#[cold]
fn from_env() -> bool {
    let path = ENV_PATH.get_or_init(|| {
        let p = std::env::var_os("TCH_SCOPE_TRACE").filter(|p| !p.is_empty())?;
        // SAFETY: registers a plain `extern "C" fn()`; nothing is unsafe
        // about the call itself.
        if unsafe { libc::atexit(write_at_exit) } != 0 {
            crate::exit::report(
                "trace",
                "TCH_SCOPE_TRACE is set but the exit handler could not be registered",
            );
        }
        start_now();
        Some(p)
    });
    if path.is_none() {
        // Only if nothing else decided meanwhile (an explicit start()).
        let _ = STATE.compare_exchange(UNINIT, OFF, Ordering::AcqRel, Ordering::Relaxed);
    }
    STATE.load(Ordering::Relaxed) == ON
}

extern "C" fn write_at_exit() {
    let Some(Some(path)) = ENV_PATH.get() else {
        return;
    };
    stop();
    // No thread-locals here: the main thread's are gone by now.
    if let Err(e) = write_chrome(path) {
        eprintln!(
            "tch-scope: could not write the trace TCH_SCOPE_TRACE={}: {e}",
            Path::new(&path).display()
        );
    }
}

/// Begins a new recording (dropping the spans of an earlier one).
///
/// ```
/// tch_scope::trace::start();
/// assert!(tch_scope::trace::is_recording());
/// tch_scope::trace::stop();
/// ```
pub fn start() {
    // Read the variable first, so it can't start a recording later.
    let _ = recording();
    start_now();
}

fn start_now() {
    let mut all = lock(&BUFFERS);
    all.clear();
    DROPPED_GONE.store(0, Ordering::Relaxed);
    EPOCH.store(crate::clock::now(), Ordering::Relaxed);
    GENERATION.fetch_add(1, Ordering::AcqRel);
    STATE.store(ON, Ordering::Release);
}

/// Stops recording; what was recorded stays until the next [`start`].
///
/// ```
/// tch_scope::trace::stop();
/// assert!(!tch_scope::trace::is_recording());
/// ```
pub fn stop() {
    let _ = recording();
    STATE.store(OFF, Ordering::Release);
}

/// Whether a recording is running.
pub fn is_recording() -> bool {
    recording()
}

/// A trace capacity refused by [`set_capacity`]: one thread's buffer would
/// need more than the whole trace may hold ([`memory_limit`]).
///
/// ```
/// let e = tch_scope::trace::set_capacity(usize::MAX).unwrap_err();
/// assert_eq!(e.requested(), usize::MAX);
/// assert!(e.max() < usize::MAX);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a trace capacity of {requested} spans per thread is over the bound of {max} spans \
     ({SLOT_BYTES} bytes a span, trace memory limit {limit} bytes; \
     tch_scope::trace::set_memory_limit raises it)"
)]
pub struct CapacityError {
    requested: usize,
    max: usize,
    limit: usize,
}

impl CapacityError {
    /// The capacity asked for, in spans per thread.
    ///
    /// ```
    /// assert_eq!(tch_scope::trace::set_capacity(usize::MAX).unwrap_err().requested(), usize::MAX);
    /// ```
    pub fn requested(&self) -> usize {
        self.requested
    }

    /// The largest capacity the current [`memory_limit`] allows.
    ///
    /// ```
    /// let max = tch_scope::trace::set_capacity(usize::MAX).unwrap_err().max();
    /// assert!(max >= 1 << 20);
    /// ```
    pub fn max(&self) -> usize {
        self.max
    }
}

/// The largest capacity the memory limit allows.
fn max_capacity() -> usize {
    budget::GLOBAL.limit() / SLOT_BYTES
}

/// Sets how many spans each thread keeps, for buffers made from now on
/// (each thread makes one at its first span after a [`start`]); 0 counts
/// as 1.
///
/// # Errors
/// [`CapacityError`] (and nothing changes) when one thread's buffer of
/// that many spans would pass [`memory_limit`].
///
/// ```
/// tch_scope::trace::set_capacity(4096).unwrap();
/// assert_eq!(tch_scope::trace::capacity(), 4096);
/// assert!(tch_scope::trace::set_capacity(usize::MAX).is_err());
/// assert_eq!(tch_scope::trace::capacity(), 4096);
/// tch_scope::trace::set_capacity(1 << 20).unwrap();
/// ```
pub fn set_capacity(spans_per_thread: usize) -> Result<(), CapacityError> {
    let max = max_capacity();
    if spans_per_thread > max {
        return Err(CapacityError {
            requested: spans_per_thread,
            max,
            limit: budget::GLOBAL.limit(),
        });
    }
    CAPACITY.store(spans_per_thread.max(1), Ordering::Relaxed);
    Ok(())
}

/// Sets how many bytes of spans the trace may hold, all threads together
/// (default 512 MiB). A lower limit frees nothing already held; buffers
/// stop growing until they are under it. Values below one chunk (1024
/// spans) count as one chunk.
///
/// ```
/// tch_scope::trace::set_memory_limit(1 << 30);
/// assert_eq!(tch_scope::trace::memory_limit(), 1 << 30);
/// tch_scope::trace::set_memory_limit(512 << 20);
/// ```
pub fn set_memory_limit(bytes: usize) {
    budget::GLOBAL.set_limit(bytes.max(1024 * SLOT_BYTES));
}

/// Bytes of spans the trace may hold, all threads together (see
/// [`set_memory_limit`]).
///
/// ```
/// assert!(tch_scope::trace::memory_limit() >= 1024);
/// ```
pub fn memory_limit() -> usize {
    budget::GLOBAL.limit()
}

/// Bytes of span buffers allocated now, all threads together.
///
/// ```
/// assert!(tch_scope::trace::memory_used() <= tch_scope::trace::memory_limit());
/// ```
pub fn memory_used() -> usize {
    budget::GLOBAL.used()
}

/// Spans a thread keeps before dropping its oldest (default 1 048 576).
///
/// ```
/// assert!(tch_scope::trace::capacity() >= 1);
/// ```
pub fn capacity() -> usize {
    CAPACITY.load(Ordering::Relaxed)
}

/// Spans of the current recording dropped for want of room, all threads.
pub fn dropped() -> u64 {
    let kept: u64 = lock(&BUFFERS).iter().map(|b| b.dropped()).sum();
    kept + DROPPED_GONE.load(Ordering::Relaxed)
}

/// Writes the current recording as Chrome trace-event JSON to `path`
/// (replaced atomically: a reader never sees half a file). Call it after
/// [`stop`] for an exact picture; while recording, spans finished during
/// the write may be missing. Once written, the buffers of threads that had
/// exited before the write are freed: a later write leaves their spans out.
///
/// # Errors
/// The error of creating, writing or renaming the file.
///
/// ```
/// let path = std::env::temp_dir().join(format!("doc-empty-{}.json", std::process::id()));
/// tch_scope::trace::write_chrome(&path).unwrap();
/// # std::fs::remove_file(&path).unwrap();
/// ```
pub fn write_chrome(path: impl AsRef<Path>) -> std::io::Result<()> {
    let (buffers, gone) = {
        let all = lock(&BUFFERS);
        (all.clone(), DROPPED_GONE.load(Ordering::Relaxed))
    };
    // Exited before the write began: everything they hold goes in the file.
    let exited: Vec<bool> = buffers.iter().map(|b| b.exited()).collect();
    let epoch = EPOCH.load(Ordering::Relaxed);
    let path = path.as_ref();
    let mut io_error = None;
    let replaced = crate::durable::replace(path, |tmp| {
        chrome::write(tmp, &buffers, epoch, gone).map_err(|e| {
            let message = e.to_string();
            io_error = Some(e);
            message
        })
    });
    match (replaced, io_error) {
        (Ok(()), _) => {
            let written = buffers.iter().zip(exited).filter(|&(_, e)| e);
            release(written.map(|(b, _)| b));
            Ok(())
        }
        (Err(_), Some(e)) => Err(e),
        (Err(e), None) => Err(std::io::Error::other(e)),
    }
}

/// Takes `written` (buffers of exited threads, now in a file) out of the
/// recording, keeping their dropped counts; freed as their last `Arc` goes.
fn release<'a>(written: impl Iterator<Item = &'a Arc<Buffer>>) {
    let mut all = lock(&BUFFERS);
    for b in written {
        if let Some(i) = all.iter().position(|a| Arc::ptr_eq(a, b)) {
            let b = all.remove(i);
            DROPPED_GONE.fetch_add(b.dropped(), Ordering::Relaxed);
        }
    }
}

/// Frees the oldest buffer of an exited thread, its spans counted as
/// dropped: room for a live thread's newer spans. `false` when there is
/// none.
fn free_an_exited_buffer() -> bool {
    let freed = {
        let mut all = lock(&BUFFERS);
        match all.iter().position(|b| b.exited()) {
            Some(i) => {
                let b = all.remove(i);
                DROPPED_GONE.fetch_add(b.written(), Ordering::Relaxed);
                b
            }
            None => return false,
        }
    };
    // Freed here (outside the lock) unless a write holds it meanwhile.
    drop(freed);
    true
}

/// The OS thread id, as the trace shows it (read once per thread).
pub(crate) fn this_tid() -> u64 {
    thread_local! {
        static TID: u64 = {
            // SAFETY: gettid has no preconditions.
            u64::try_from(unsafe { libc::gettid() }).unwrap_or(0)
        };
    }
    TID.try_with(|t| *t).unwrap_or(0)
}
