//! This thread's buffer of the current recording, and the one
//! thread-local the hot path reads to write into it.

use std::cell::{RefCell, UnsafeCell};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::buffer::{At, Buffer, SpanRecord};
use super::{BUFFERS, CAPACITY, GENERATION, budget, free_an_exited_buffer, this_tid};
use crate::report::lock;

/// This thread's buffer of the current recording: owned here (the drop
/// marks it exited), written through [`CURSOR`].
struct Local {
    buffer: Option<Arc<Buffer>>,
}

impl Drop for Local {
    /// The thread is gone: its buffer can be freed once written.
    fn drop(&mut self) {
        // No span after this goes to the buffer.
        set_cursor(Cursor::NONE);
        if let Some(b) = &self.buffer {
            b.set_exited();
        }
    }
}

/// Where this thread's next span goes: the hot path's one thread-local, a
/// plain cell (no destructor, so no registration check per access). `buf`
/// is `LOCAL`'s buffer while that lives, null before and after.
#[derive(Clone, Copy)]
struct Cursor {
    buf: *const Buffer,
    at: At,
    generation: u64,
}

impl Cursor {
    const NONE: Cursor = Cursor {
        buf: std::ptr::null(),
        at: At::START,
        generation: 0,
    };
}

thread_local! {
    static LOCAL: RefCell<Local> = const { RefCell::new(Local { buffer: None }) };
    /// Written in place through its pointer (a copy in and out of a `Cell`
    /// cost more than the span's own stores).
    static CURSOR: UnsafeCell<Cursor> = const { UnsafeCell::new(Cursor::NONE) };
}

/// Sets this thread's cursor.
fn set_cursor(c: Cursor) {
    // SAFETY: this thread's cursor; no reference to it is live here.
    CURSOR.with(|p| unsafe { *p.get() = c });
}

/// Appends a finished span to this thread's buffer (call only while
/// [`recording`]; a span of a thread being torn down is lost).
#[inline(always)]
pub(crate) fn push(span: &SpanRecord) {
    let c = CURSOR.with(UnsafeCell::get);
    // SAFETY: this thread's cursor, reached only through raw pointers and
    // only on this thread; `renew` writes it while nothing else holds it;
    // `LOCAL` holds the buffer while the cursor points to it.
    unsafe {
        if ((*c).buf.is_null() || (*c).generation != GENERATION.load(Ordering::Acquire))
            && renew().is_none()
        {
            return;
        }
        (*(*c).buf).push(&mut (*c).at, span, free_an_exited_buffer);
    }
}

/// A buffer for this thread in the current recording; `None` while the
/// thread is torn down.
#[cold]
fn renew() -> Option<Cursor> {
    let mut all = lock(&BUFFERS);
    // Read under the lock that `start` bumps it under: this buffer belongs
    // to the recording it joins.
    let generation = GENERATION.load(Ordering::Acquire);
    let tid = this_tid();
    let name = std::thread::current()
        .name()
        .map_or_else(|| format!("thread {tid}"), str::to_owned);
    let b = Arc::new(Buffer::new(
        CAPACITY.load(Ordering::Relaxed),
        tid,
        name,
        &budget::GLOBAL,
    ));
    let c = Cursor {
        buf: Arc::as_ptr(&b),
        at: At::START,
        generation,
    };
    // Not `*l = …`: that would drop the old Local, marking its buffer (of
    // an earlier recording, but this thread's) exited.
    LOCAL
        .try_with(|l| l.borrow_mut().buffer = Some(b.clone()))
        .ok()?;
    all.push(b);
    set_cursor(c);
    Some(c)
}
