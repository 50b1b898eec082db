//! [`Stream`]: a CUDA stream, and the `stream(s)` scope over it.

use tch::Device;

use crate::{Scope, ScopeError, ffi};

/// `c10::Stream::pack3` of a CUDA stream, as the shim passes it: its
/// `tch_scope_stream` (`csrc/stream.h`, which asserts the same layout).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Raw {
    id: i64,
    device: i8,
}

const _: () = {
    assert!(size_of::<Raw>() == 16 && align_of::<Raw>() == 8);
    assert!(std::mem::offset_of!(Raw, id) == 0 && std::mem::offset_of!(Raw, device) == 8);
};

unsafe extern "C" {
    fn tch_scope_stream_pool(device: i8, high_priority: bool, out: *mut Raw) -> ffi::Status;
    fn tch_scope_stream_current(device: i8, out: *mut Raw) -> ffi::Status;
    fn tch_scope_stream_default(device: i8, out: *mut Raw) -> ffi::Status;
    fn tch_scope_stream_enter(s: Raw, previous_device: *mut i8, previous: *mut Raw) -> ffi::Status;
    fn tch_scope_stream_leave(previous_device: i8, previous: Raw) -> ffi::Status;
    fn tch_scope_stream_synchronize(s: Raw) -> ffi::Status;
    fn tch_scope_stream_query(s: Raw, done: *mut bool) -> ffi::Status;
    fn tch_scope_stream_wait(waiter: Raw, other: Raw) -> ffi::Status;
}

/// A CUDA stream (`torch.cuda.Stream`): a handle, cheap to copy, to one of
/// libtorch's streams. Work queued while a `stream(s)` scope is open goes
/// to `s`; streams run concurrently unless one waits for another
/// ([`wait_stream`](Self::wait_stream), [`Event`](super::Event)).
///
/// Every constructor and method returns a [`ScopeError`] where there is no
/// such CUDA device (or no CUDA at all).
///
/// ```no_run
/// use tch_scope::cuda::Stream;
/// if tch_scope::cuda_device_count() == 0 {
///     let e = Stream::from_pool(0, false).unwrap_err();
///     assert_eq!(e.device(), Some(tch::Device::Cuda(0)));
///     assert!(e.reason().contains("CUDA is not available"), "{e}");
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stream {
    raw: Raw,
}

fn get(
    scope: &str,
    device: usize,
    f: impl FnOnce(i8, *mut Raw) -> ffi::Status,
) -> Result<Stream, ScopeError> {
    let index = crate::cuda::require(scope, device)?;
    let mut raw = Raw { id: 0, device: 0 };
    let index = i8::try_from(index).unwrap_or(i8::MAX);
    ffi::check(f(index, &mut raw))
        .map_err(|e| ScopeError::new(scope.to_owned(), Some(Device::Cuda(device)), e))?;
    Ok(Stream { raw })
}

impl Stream {
    /// A stream from libtorch's pool for `device` (`torch.cuda.Stream(device)`;
    /// the pool hands its streams out round-robin). `high_priority` picks
    /// from the high-priority pool (`priority=-1`).
    ///
    /// # Errors
    /// No such CUDA device.
    pub fn from_pool(device: usize, high_priority: bool) -> Result<Stream, ScopeError> {
        get("cuda::Stream::from_pool", device, |d, out| {
            // SAFETY: a writable out-param; exceptions caught by the shim.
            unsafe { tch_scope_stream_pool(d, high_priority, out) }
        })
    }

    /// The thread's current stream on `device` (`torch.cuda.current_stream`).
    ///
    /// # Errors
    /// No such CUDA device.
    pub fn current(device: usize) -> Result<Stream, ScopeError> {
        get("cuda::Stream::current", device, |d, out| {
            // SAFETY: as in `from_pool`.
            unsafe { tch_scope_stream_current(d, out) }
        })
    }

    /// The default (null) stream of `device` (`torch.cuda.default_stream`).
    ///
    /// # Errors
    /// No such CUDA device.
    pub fn default_stream(device: usize) -> Result<Stream, ScopeError> {
        get("cuda::Stream::default_stream", device, |d, out| {
            // SAFETY: as in `from_pool`.
            unsafe { tch_scope_stream_default(d, out) }
        })
    }

    /// The device the stream belongs to.
    pub fn device(&self) -> Device {
        Device::Cuda(usize::try_from(self.raw.device).unwrap_or(0))
    }

    /// libtorch's id of the stream (`torch.cuda.Stream.stream_id`).
    pub fn id(&self) -> i64 {
        self.raw.id
    }

    fn error(&self, what: &str, e: String) -> ScopeError {
        ScopeError::new(format!("cuda::Stream::{what}"), Some(self.device()), e)
    }

    /// Blocks until every kernel queued on the stream has finished.
    ///
    /// # Errors
    /// A CUDA error.
    pub fn synchronize(&self) -> Result<(), ScopeError> {
        // SAFETY: a stream handle; exceptions caught by the shim.
        ffi::check(unsafe { tch_scope_stream_synchronize(self.raw) })
            .map_err(|e| self.error("synchronize", e))
    }

    /// Whether everything queued on the stream has finished.
    ///
    /// # Errors
    /// A CUDA error.
    pub fn query(&self) -> Result<bool, ScopeError> {
        let mut done = false;
        // SAFETY: a writable out-param; exceptions caught by the shim.
        ffi::check(unsafe { tch_scope_stream_query(self.raw, &mut done) })
            .map_err(|e| self.error("query", e))?;
        Ok(done)
    }

    /// `torch.cuda.Stream.wait_stream(other)`: work queued on this stream
    /// from now on starts after the work queued on `other` so far. Neither
    /// the host nor `other` waits.
    ///
    /// # Errors
    /// A CUDA error.
    pub fn wait_stream(&self, other: &Stream) -> Result<(), ScopeError> {
        // SAFETY: two stream handles; exceptions caught by the shim.
        ffi::check(unsafe { tch_scope_stream_wait(self.raw, other.raw) })
            .map_err(|e| self.error("wait_stream", e))
    }

    pub(crate) fn raw_parts(&self) -> (i64, i8) {
        (self.raw.id, self.raw.device)
    }
}

/// `stream(s)` (`torch.cuda.stream(s)`, `c10::cuda::CUDAStreamGuard`): the
/// stream's device becomes the thread's current device and the stream its
/// current stream there; both are put back on exit. Per thread, like
/// libtorch's current stream (the guard is `!Send`; async code re-enters
/// it on every poll).
impl Scope for Stream {
    type Guard = StreamGuard;
    type Error = ScopeError;

    /// # Errors
    /// A CUDA error.
    fn enter(&mut self) -> Result<StreamGuard, ScopeError> {
        let (mut device, mut stream) = (0i8, Raw { id: 0, device: 0 });
        // SAFETY: a stream handle and writable out-params; exceptions
        // caught by the shim (which undoes the device change on failure).
        ffi::check(unsafe { tch_scope_stream_enter(self.raw, &mut device, &mut stream) })
            .map_err(|e| ScopeError::new("stream", Some(self.device()), e))?;
        Ok(StreamGuard {
            device,
            stream,
            _not_send: crate::PhantomNotSend::NEW,
        })
    }
}

/// Puts back the current device and its current stream.
#[must_use = "a scope guard restores the state when dropped; bind it with `let _guard = …`"]
#[derive(Debug)]
pub struct StreamGuard {
    device: i8,
    stream: Raw,
    _not_send: crate::PhantomNotSend,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        // SAFETY: what enter saved; exceptions caught by the shim.
        let status = unsafe { tch_scope_stream_leave(self.device, self.stream) };
        if let Err(e) = ffi::check(status) {
            crate::exit::report("stream", format_args!("could not restore the stream: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Stream;

    #[test]
    fn a_stream_without_cuda_is_an_error_naming_the_device() {
        if crate::cuda_device_count() > 0 {
            return; // tests/gpu.rs covers streams on a device
        }
        let e = Stream::from_pool(0, false).unwrap_err();
        assert_eq!(e.device(), Some(tch::Device::Cuda(0)));
        assert!(e.reason().contains("CUDA is not available"), "{e}");
    }
}
