//! Bindings to the shim's CUDA memory and synchronisation calls
//! (`csrc/memory.h`), and the checks every CUDA scope makes first.

use tch::Device;

use crate::{ScopeError, ffi};

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Stats {
    pub allocated: i64,
    pub allocated_peak: i64,
    pub reserved: i64,
    pub reserved_peak: i64,
}

unsafe extern "C" {
    fn tch_scope_cuda_memory_stats(device: i32, out: *mut Stats) -> ffi::Status;
    fn tch_scope_cuda_reset_peak(device: i32) -> ffi::Status;
    fn tch_scope_cuda_empty_cache() -> ffi::Status;
    fn tch_scope_cuda_synchronize(device: i32) -> ffi::Status;
}

/// `index` as the shim's device index, once it is known to exist; the
/// reason otherwise.
pub(crate) fn checked_index(index: usize) -> Result<i32, String> {
    let count = crate::cuda_device_count();
    if count == 0 {
        return Err(if crate::built_with_cuda() {
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
