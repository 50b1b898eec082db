//! [`Event`]: a CUDA event with timing.

use std::ffi::c_void;
use std::time::Duration;

use tch::Device;

use super::Stream;
use crate::{ScopeError, ffi};

unsafe extern "C" {
    fn tch_scope_event_new(event: *mut *mut c_void) -> ffi::Status;
    fn tch_scope_event_free(event: *mut c_void);
    fn tch_scope_event_record(event: *mut c_void, id: i64, device: i8) -> ffi::Status;
    fn tch_scope_event_synchronize(event: *const c_void) -> ffi::Status;
    fn tch_scope_event_query(event: *const c_void, done: *mut bool) -> ffi::Status;
    fn tch_scope_event_elapsed(
        start: *const c_void,
        end: *const c_void,
        ms: *mut f64,
    ) -> ffi::Status;
}

/// A CUDA event with timing (`torch.cuda.Event(enable_timing=True)`): a
/// mark in a stream's queue, passed when the work queued before it is done.
/// Two recorded events time the GPU work between them without stopping
/// the host.
///
/// ```no_run
/// use tch_scope::cuda::{Event, Stream};
/// # fn main() -> Result<(), tch_scope::ScopeError> {
/// let s = Stream::current(0)?;
/// let (mut start, mut end) = (Event::new()?, Event::new()?);
/// start.record(&s)?;
/// // … queue kernels on `s` …
/// end.record(&s)?;
/// println!("{:?} on the GPU", start.elapsed(&end)?); // waits for `end` only
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Event {
    raw: *mut c_void,
    /// Where it was last recorded.
    device: Option<Device>,
}

// SAFETY: a CUDA event handle may be used from any host thread (the CUDA
// runtime is thread-safe, and an event is not bound to the thread that made
// it); `&mut self` on `record` keeps one writer at a time. A `timed(events)`
// guard held by a future that moves between worker threads needs this.
unsafe impl Send for Event {}

impl Event {
    /// A new event, not yet recorded.
    ///
    /// # Errors
    /// libtorch has no CUDA.
    pub fn new() -> Result<Event, ScopeError> {
        if crate::cuda_device_count() == 0 {
            return Err(ScopeError::new(
                "cuda::Event::new",
                None,
                "CUDA is not available (libtorch without CUDA, or no GPU)",
            ));
        }
        let mut raw = std::ptr::null_mut();
        // SAFETY: a writable out-param; exceptions caught by the shim.
        ffi::check(unsafe { tch_scope_event_new(&mut raw) })
            .map_err(|e| ScopeError::new("cuda::Event::new", None, e))?;
        Ok(Event { raw, device: None })
    }

    fn error(&self, what: &str, e: String) -> ScopeError {
        ScopeError::new(format!("cuda::Event::{what}"), self.device, e)
    }

    /// Marks the point in `stream`'s queue reached so far
    /// (`torch.cuda.Event.record(stream)`).
    ///
    /// # Errors
    /// A CUDA error (an event cannot move to another device).
    pub fn record(&mut self, stream: &Stream) -> Result<(), ScopeError> {
        let (id, device) = stream.raw_parts();
        // SAFETY: our event and a stream handle; exceptions caught.
        ffi::check(unsafe { tch_scope_event_record(self.raw, id, device) })
            .map_err(|e| ScopeError::new("cuda::Event::record", Some(stream.device()), e))?;
        self.device = Some(stream.device());
        Ok(())
    }

    /// Blocks until the work before the event is done.
    ///
    /// # Errors
    /// A CUDA error.
    pub fn synchronize(&self) -> Result<(), ScopeError> {
        // SAFETY: our event; exceptions caught by the shim.
        ffi::check(unsafe { tch_scope_event_synchronize(self.raw) })
            .map_err(|e| self.error("synchronize", e))
    }

    /// Whether the work before the event is done (`true` if never recorded).
    ///
    /// # Errors
    /// A CUDA error.
    pub fn query(&self) -> Result<bool, ScopeError> {
        let mut done = false;
        // SAFETY: our event, a writable out-param; exceptions caught.
        ffi::check(unsafe { tch_scope_event_query(self.raw, &mut done) })
            .map_err(|e| self.error("query", e))?;
        Ok(done)
    }

    /// The GPU time from this event to `end` (`elapsed_time`), both
    /// recorded; waits for `end` (only), not for the whole device.
    ///
    /// # Errors
    /// Either event was never recorded, or a CUDA error.
    pub fn elapsed(&self, end: &Event) -> Result<Duration, ScopeError> {
        let mut ms = 0f64;
        // SAFETY: two live events and a writable out-param; exceptions caught.
        ffi::check(unsafe { tch_scope_event_elapsed(self.raw, end.raw, &mut ms) })
            .map_err(|e| self.error("elapsed", e))?;
        Ok(Duration::from_secs_f64(ms.max(0.0) / 1e3))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: made by tch_scope_event_new, freed once.
        unsafe { tch_scope_event_free(self.raw) }
    }
}
