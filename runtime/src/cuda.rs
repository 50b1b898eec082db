//! CUDA streams and events: [`Stream`] (the `stream(s)` scope) and
//! [`Event`]. Without a CUDA device every call returns a
//! [`ScopeError`] saying so.
//!
//! (Inside the crate, this module is CUDA through the shim: the device
//! count, the thread's current device, synchronisation, the caching
//! allocator's statistics and the one check every CUDA scope makes first;
//! `device`, `timed` and the memory scopes go through here.)

mod event;
mod stream;

pub use event::Event;
pub use stream::{Stream, StreamGuard};

use std::sync::OnceLock;

use tch::Device;

use crate::{ScopeError, ffi};

/// The shim's `tch_scope_memory_stats` (`csrc/memory.h`, which asserts the
/// same layout).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Stats {
    pub allocated: i64,
    pub allocated_peak: i64,
    pub reserved: i64,
    pub reserved_peak: i64,
}

const _: () = {
    use std::mem::offset_of;
    assert!(size_of::<Stats>() == 32 && align_of::<Stats>() == 8);
    assert!(offset_of!(Stats, allocated) == 0 && offset_of!(Stats, allocated_peak) == 8);
    assert!(offset_of!(Stats, reserved) == 16 && offset_of!(Stats, reserved_peak) == 24);
};

unsafe extern "C" {
    fn tch_scope_cuda_device_count(count: *mut i32) -> ffi::Status;
    fn tch_scope_cuda_exchange_device(index: i32, previous: *mut i32) -> ffi::Status;
    fn tch_scope_cuda_current_device(index: *mut i32) -> ffi::Status;
    fn tch_scope_cuda_memory_stats(device: i32, out: *mut Stats) -> ffi::Status;
    fn tch_scope_cuda_reset_peak(device: i32) -> ffi::Status;
    fn tch_scope_cuda_empty_cache() -> ffi::Status;
    fn tch_scope_cuda_synchronize(device: i32) -> ffi::Status;
}

/// Number of CUDA devices libtorch sees (0 without CUDA or without a GPU).
/// Read once per process, like `torch.cuda.device_count()` caches it.
///
/// ```no_run
/// let n = tch_scope::cuda_device_count();
/// assert_eq!(n, tch::Cuda::device_count() as usize);
/// ```
pub fn cuda_device_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        let mut n = 0i32;
        // SAFETY: `n` is writable; the shim catches C++ exceptions.
        match ffi::check(unsafe { tch_scope_cuda_device_count(&mut n) }) {
            Ok(()) => usize::try_from(n).unwrap_or(0),
            Err(_) => 0,
        }
    })
}

/// Whether this build links libtorch_cuda (the libtorch found had CUDA).
pub fn built_with_cuda() -> bool {
    ffi::built_with_cuda()
}

/// The thread's current CUDA device index (`torch.cuda.current_device()`),
/// or `None` without CUDA.
///
/// ```no_run
/// if tch_scope::cuda_device_count() == 0 {
///     assert_eq!(tch_scope::current_cuda_device(), None);
/// }
/// ```
pub fn current_cuda_device() -> Option<usize> {
    if cuda_device_count() == 0 {
        return None;
    }
    let mut i = 0i32;
    // SAFETY: `i` is writable; the shim catches C++ exceptions.
    ffi::check(unsafe { tch_scope_cuda_current_device(&mut i) }).ok()?;
    usize::try_from(i).ok()
}

/// `index` as the shim's device index, once it is known to exist; the
/// reason otherwise.
pub(crate) fn checked_index(index: usize) -> Result<i32, String> {
    let count = cuda_device_count();
    if count == 0 {
        return Err(if built_with_cuda() {
            "CUDA is not available: libtorch sees no CUDA device on this machine".into()
        } else {
            "CUDA is not available: this libtorch was built without CUDA".into()
        });
    }
    if index >= count {
        return Err(format!(
            "device index {index} is out of range: this machine has {count} CUDA device{}",
            if count == 1 { "" } else { "s" }
        ));
    }
    i32::try_from(index).map_err(|_| "device index too large".into())
}

/// [`checked_index`] as a `ScopeError` of `scope`.
pub(crate) fn require(scope: &str, index: usize) -> Result<i32, ScopeError> {
    checked_index(index)
        .map_err(|r| ScopeError::new(scope.to_owned(), Some(Device::Cuda(index)), r))
}

/// Makes `device` the thread's current CUDA device; returns the previous.
pub(crate) fn exchange_device(device: i32) -> Result<i32, String> {
    let mut previous = 0i32;
    // SAFETY: `previous` is writable; the shim catches C++ exceptions.
    ffi::check(unsafe { tch_scope_cuda_exchange_device(device, &mut previous) })?;
    Ok(previous)
}

pub(crate) fn stats(device: i32) -> Result<Stats, String> {
    let mut s = Stats::default();
    // SAFETY: `s` is a writable repr(C) mirror of tch_scope_memory_stats.
    ffi::check(unsafe { tch_scope_cuda_memory_stats(device, &mut s) })?;
    Ok(s)
}

pub(crate) fn reset_peak(device: i32) -> Result<(), String> {
    // SAFETY: plain value argument; the shim catches exceptions.
    ffi::check(unsafe { tch_scope_cuda_reset_peak(device) })
}

pub(crate) fn empty_cache() -> Result<(), String> {
    // SAFETY: no arguments; the shim catches exceptions.
    ffi::check(unsafe { tch_scope_cuda_empty_cache() })
}

pub(crate) fn synchronize(device: i32) -> Result<(), String> {
    // SAFETY: plain value argument; the shim catches exceptions.
    ffi::check(unsafe { tch_scope_cuda_synchronize(device) })
}

#[cfg(test)]
mod tests {
    #[test]
    fn device_count_is_tchs_and_no_current_device_without_cuda() {
        let n = super::cuda_device_count();
        assert_eq!(n, usize::try_from(tch::Cuda::device_count()).unwrap());
        if n == 0 {
            assert_eq!(super::current_cuda_device(), None);
        }
    }
}
