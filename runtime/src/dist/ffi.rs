//! Bindings to `csrc/distributed.cpp` (contract in `csrc/distributed.h`).

use std::ffi::{c_char, c_void};

use crate::ffi::Status;

/// The shim's `tch_scope_dist_group`: a store and a process group.
#[repr(C)]
pub(crate) struct RawGroup {
    _opaque: [u8; 0],
}

unsafe extern "C" {
    pub(crate) fn tch_scope_dist_has_backend(backend: i32) -> i32;
    pub(crate) fn tch_scope_dist_init(
        backend: i32,
        host: *const c_char,
        port: u16,
        rank: i32,
        world_size: i32,
        store_server: bool,
        prefix: *const c_char,
        timeout_ms: i64,
        out: *mut *mut RawGroup,
    ) -> Status;
    pub(crate) fn tch_scope_dist_free(group: *mut RawGroup);
    pub(crate) fn tch_scope_dist_all_reduce(
        group: *mut RawGroup,
        t: *mut c_void,
        op: i32,
    ) -> Status;
    pub(crate) fn tch_scope_dist_broadcast(
        group: *mut RawGroup,
        t: *mut c_void,
        root: i32,
    ) -> Status;
    pub(crate) fn tch_scope_dist_all_gather(
        group: *mut RawGroup,
        input: *mut c_void,
        outputs: *const *mut c_void,
        n: usize,
    ) -> Status;
    pub(crate) fn tch_scope_dist_barrier(group: *mut RawGroup) -> Status;
}
