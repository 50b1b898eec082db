//! The one way tch-scope takes its own locks.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `m`, ignoring poison. Every state behind tch-scope's locks is
/// changed by whole statements (a push, a remove, an assignment, a counter
/// bump), so a panic elsewhere while one was held leaves it consistent;
/// refusing it would turn one panic into a failure of every later scope,
/// and a panic inside a guard's `Drop` while unwinding aborts the process.
#[inline]
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads `l`, ignoring poison (see [`lock`]).
#[inline]
pub(crate) fn read<T: ?Sized>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// Writes `l`, ignoring poison (see [`lock`]).
#[inline]
pub(crate) fn write<T: ?Sized>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}
