//! A worker's own intra-op thread count, set on its thread alone.
//!
//! `at::set_num_threads` would also change the process's value, which
//! every thread that has not run a parallel op yet copies (an
//! application's own threads, a server's runtime threads). libtorch keeps
//! the count per thread (OpenMP's count of the thread, and MKL's
//! thread-local one), read at the thread's first parallel op from the
//! process value: so the worker first lets libtorch initialise its count
//! (`at::get_num_threads` does), then sets the two per-thread counts
//! itself, through the symbols libtorch's own libraries export.

use std::ffi::{CStr, c_int, c_void};

/// Sets the calling thread's intra-op thread count to `n` (at least 1),
/// leaving the process's value and every other thread's count as they
/// are. What the libtorch found lacks (no OpenMP, no MKL: a build with
/// another thread pool) is left alone; `tch::get_num_threads()` on this
/// thread then says what was set.
pub(super) fn set_this_threads(n: usize) {
    let n = c_int::try_from(n.max(1)).unwrap_or(c_int::MAX);
    // libtorch's per-thread initialisation, from the process value, before
    // ours, so that it never runs after and overwrites it.
    let _ = tch::get_num_threads();
    // SAFETY: the C functions of these names: OpenMP's
    // `void omp_set_num_threads(int)`, MKL's
    // `int MKL_Set_Num_Threads_Local(int)` (the previous local count; what
    // mkl_service.h's `mkl_set_num_threads_local` names: the symbol of
    // that name is the Fortran entry, which takes a pointer).
    unsafe {
        if let Some(p) = symbol(c"omp_set_num_threads") {
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int)>(p)(n);
        }
        if let Some(p) = symbol(c"MKL_Set_Num_Threads_Local") {
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int) -> c_int>(p)(n);
        }
    }
}

/// The address of `name` in a library already loaded (libtorch's OpenMP
/// runtime, MKL inside `libtorch_cpu`), if one exports it.
#[cfg(unix)]
fn symbol(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: `dlsym` with `RTLD_DEFAULT` searches the libraries loaded;
    // `name` is a valid C string; null when none has it.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

#[cfg(not(unix))]
fn symbol(_: &CStr) -> Option<*mut c_void> {
    None
}
