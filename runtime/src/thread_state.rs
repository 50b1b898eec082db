//! This thread's libtorch state pointers, looked up once per thread.
//!
//! Every `c10::GradMode` call goes through `__tls_get_addr` inside libc10.so
//! (several ns each). The pointers it returns are valid for the thread's
//! life, so a Rust `thread_local!` (a plain `fs:`-relative load in the final
//! binary) keeps them and the hot path makes no lookup at all.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr;

use crate::ffi;

unsafe extern "C" {
    fn tch_scope_tls_pointers(
        autograd_state: *mut *mut c_void,
        dispatch_keys: *mut *mut c_void,
    ) -> ffi::Status;
}

/// Pointers to this thread's `c10::AutogradState` and local dispatch-key set.
#[derive(Clone, Copy)]
pub(crate) struct Tls {
    pub autograd: *mut c_void,
    pub keys: *mut c_void,
}

thread_local! {
    static TLS: Cell<Tls> = const {
        Cell::new(Tls { autograd: ptr::null_mut(), keys: ptr::null_mut() })
    };
}

/// This thread's pointers; the first call on a thread asks libtorch.
///
/// Taking the address of a C++ thread-local cannot fail, so neither can
/// this: grad and inference mode are infallible scopes.
#[inline]
pub(crate) fn get() -> Tls {
    let t = TLS.with(Cell::get);
    if !t.autograd.is_null() {
        return t;
    }
    init().unwrap_or_else(|e| panic!("libtorch gave no thread state: {e}"))
}

#[cold]
fn init() -> Result<Tls, String> {
    let mut t = Tls {
        autograd: ptr::null_mut(),
        keys: ptr::null_mut(),
    };
    // SAFETY: both out-pointers are valid for writes.
    ffi::check(unsafe { tch_scope_tls_pointers(&mut t.autograd, &mut t.keys) })?;
    TLS.with(|c| c.set(t));
    Ok(t)
}
