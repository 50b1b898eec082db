//! Panics met on a worker thread: their message, and their payload
//! dropped without letting a second panic (from the payload's own `drop`)
//! escape.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// A panic's message: its `&str` or `String` payload, else a placeholder.
pub(crate) fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".to_owned())
}

/// Drops a caught panic's payload; if that drop panics in turn, the second
/// payload is leaked rather than dropped (a worker must not end on it).
pub(crate) fn discard(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

/// `f`'s value, or `None` when it panicked (its payload discarded).
pub(crate) fn quietly<T>(f: impl FnOnce() -> T) -> Option<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => Some(v),
        Err(p) => {
            discard(p);
            None
        }
    }
}
