//! Per-thread span buffers: written by their thread without locks, read by
//! whoever writes the trace.
//!
//! A buffer is a ring of `cap` slots in chunks allocated on first use (a
//! thread that records ten spans holds one chunk, not a million slots).
//! Only the owner thread writes; it stores the slot's fields, then bumps
//! `written` with `Release`, so a reader that loads `written` with
//! `Acquire` sees every slot below it complete. Fields are atomics so a
//! reader racing the owner's wrap-around (a trace written while recording)
//! reads an old or a new value, never undefined behaviour.
//!
//! Every chunk is reserved from the process-wide budget
//! ([`super::budget`]) first. When the budget is spent, the buffer asks its
//! caller to make room (the trace frees a buffer of an exited thread);
//! failing that, the ring shrinks to the chunks it already has, so the
//! thread keeps its newest spans and drops (and counts) its oldest.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use super::budget::Budget;
use crate::report::Outcome;

/// Spans per chunk (64 KiB: a slot is one 64-byte cache line).
const CHUNK: usize = 1024;
/// Bytes of one slot (one span).
pub(crate) const SLOT_BYTES: usize = std::mem::size_of::<Slot>();
/// Bytes of one chunk, as reserved from the budget.
const CHUNK_BYTES: usize = CHUNK * SLOT_BYTES;
/// How many slots ahead a push asks the cache for: the ring streams
/// through memory, and a slot not yet in cache costs the push a miss.
const AHEAD: usize = 4;

/// Asks for the cache line at `p` (a hint: a prefetch never faults, past
/// a chunk's end included; nothing where the CPU has no such hint).
#[inline(always)]
fn prefetch_for_write(p: *mut Slot) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing and never faults.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_ET0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_ET0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// What made a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Timed = 1,
    Record = 2,
    HostMemory = 3,
    GpuMemory = 4,
    TensorMemory = 5,
    /// An instant ([`super::mark`]): `start == end`.
    Mark = 6,
    /// A [`Context`](crate::Context) entered on this thread: `start` is its
    /// capture, `end` its entry, `bytes` the capturing thread's id and the
    /// flow's id.
    Flow = 7,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Kind::Timed,
            2 => Kind::Record,
            3 => Kind::HostMemory,
            4 => Kind::GpuMemory,
            5 => Kind::TensorMemory,
            6 => Kind::Mark,
            7 => Kind::Flow,
            _ => return None,
        })
    }

    /// The event's category in the trace.
    pub(crate) fn category(self) -> &'static str {
        match self {
            Kind::Timed => "timed",
            Kind::Record => "record",
            Kind::HostMemory => "memory_scope",
            Kind::GpuMemory => "gpu_memory_scope",
            Kind::TensorMemory => "tensor_memory",
            Kind::Mark => "mark",
            Kind::Flow => "context",
        }
    }

    /// Whether its spans carry bytes (at entry, at exit, peak).
    pub(crate) fn has_bytes(self) -> bool {
        matches!(
            self,
            Kind::HostMemory | Kind::GpuMemory | Kind::TensorMemory
        )
    }

    /// Whether its records use [`SpanRecord::bytes`] (memory spans, flows).
    fn has_words(self) -> bool {
        self.has_bytes() || self == Kind::Flow
    }
}

/// One finished span of a scope (its kind, name, start and end, outcome
/// and bytes), as a thread records it into its buffer and the trace
/// writer reads it back: a record, not a live span (nothing is entered).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpanRecord {
    pub kind: Kind,
    /// One word, so a slot's name can't tear (see `super::intern`).
    pub name: &'static &'static str,
    /// Raw clock readings (see `crate::clock`).
    pub start: u64,
    pub end: u64,
    pub outcome: Outcome,
    /// Memory scopes: bytes at entry, at exit, the peak, and the counter
    /// track's level at entry (an `i64`'s bits: for `tensor_memory` the
    /// thread's level, else the bytes at entry). Flows: the capturing
    /// thread's id and the flow's id.
    pub bytes: [u64; 4],
}

#[derive(Default)]
struct Slot {
    start: AtomicU64,
    end: AtomicU64,
    name: AtomicPtr<&'static str>,
    /// Kind (low 8 bits) and outcome (bits 8..16).
    meta: AtomicU64,
    bytes: [AtomicU64; 4],
}

/// The owner's place in its ring: the next position, and from its slot on
/// the slots left in that chunk (0: find the chunk first). Kept by the
/// owner thread, beside the buffer it points into.
#[derive(Clone, Copy)]
pub(crate) struct At {
    pos: usize,
    slot: *mut Slot,
    left: usize,
}

impl At {
    /// The start of a ring.
    pub(crate) const START: At = At {
        pos: 0,
        slot: std::ptr::null_mut(),
        left: 0,
    };
}

/// One thread's spans of one recording.
pub(crate) struct Buffer {
    /// The OS thread id, as Chrome traces and libtorch's profiler show it.
    pub tid: u64,
    pub thread_name: String,
    /// Slots in the ring: as asked, or fewer once the budget was spent
    /// (lowered once, by the owner, when it wraps early).
    cap: AtomicUsize,
    /// Spans pushed so far (more than `cap` once the oldest were dropped).
    written: AtomicU64,
    /// Spans that found no slot at all (no chunk and no budget).
    lost: AtomicU64,
    /// Set when the owner thread exited: no span comes after.
    exited: AtomicBool,
    /// Where its chunks are reserved.
    budget: &'static Budget,
    chunks: Box<[AtomicPtr<Slot>]>,
}

impl Buffer {
    pub(crate) fn new(cap: usize, tid: u64, thread_name: String, budget: &'static Budget) -> Self {
        let cap = cap.max(1);
        Self {
            tid,
            thread_name,
            cap: AtomicUsize::new(cap),
            written: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            exited: AtomicBool::new(false),
            budget,
            chunks: (0..cap.div_ceil(CHUNK))
                .map(|_| AtomicPtr::default())
                .collect(),
        }
    }

    /// Slots in the ring now.
    #[cfg(test)]
    pub(crate) fn cap(&self) -> usize {
        self.cap.load(Ordering::Relaxed)
    }

    /// Marks the owner thread gone: no span comes after.
    pub(crate) fn set_exited(&self) {
        self.exited.store(true, Ordering::Release);
    }

    /// Whether the owner thread is gone.
    pub(crate) fn exited(&self) -> bool {
        self.exited.load(Ordering::Acquire)
    }

    /// Spans pushed so far, kept or not.
    pub(crate) fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire) + self.lost.load(Ordering::Relaxed)
    }

    /// Writes `s` at the owner's place `at` in the ring and moves `at` on.
    /// When the slot's chunk is not there and the budget has no room even
    /// after `make_room` (which frees what it can and says whether it
    /// did), the ring shrinks to the chunks it has and `s` goes to position
    /// 0, over the oldest span. Only the owning thread calls this.
    // Always inline: the record's fields stay in registers (through memory,
    // its kind and outcome bytes made a store-forwarding stall per span).
    #[inline(always)]
    pub(crate) fn push(&self, at: &mut At, s: &SpanRecord, make_room: fn() -> bool) {
        if at.left == 0 && !self.place(at, make_room) {
            self.lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // SAFETY: `place` pointed `at.slot` into a live chunk (freed only
        // with the buffer) with `at.left` slots from it.
        let slot = unsafe { &*at.slot };
        let r = Ordering::Relaxed;
        slot.start.store(s.start, r);
        slot.end.store(s.end, r);
        slot.name.store(std::ptr::from_ref(s.name).cast_mut(), r);
        let meta = s.kind as u64 | u64::from(s.outcome.to_u8()) << 8;
        slot.meta.store(meta, r);
        // Only memory spans and flows carry words (the reader looks at no
        // others').
        if s.kind.has_words() {
            for (to, &b) in slot.bytes.iter().zip(&s.bytes) {
                to.store(b, r);
            }
        }
        let n = self.written.load(r);
        self.written.store(n + 1, Ordering::Release);
        prefetch_for_write(at.slot.wrapping_add(AHEAD));
        at.slot = at.slot.wrapping_add(1);
        at.left -= 1;
        at.pos += 1;
    }

    /// Points `at` at its position's slot (wrapping past the ring's end),
    /// making the chunk if need be; `false` when there is no room at all.
    #[cold]
    #[inline(never)]
    fn place(&self, at: &mut At, make_room: fn() -> bool) -> bool {
        if at.pos >= self.cap.load(Ordering::Relaxed) {
            at.pos = 0;
        }
        let chunk = &self.chunks[at.pos / CHUNK];
        let mut base = chunk.load(Ordering::Relaxed);
        if base.is_null() {
            match self.grow(chunk, make_room) {
                Some(b) => base = b,
                None => match self.shrink(at.pos) {
                    Some(b) => {
                        at.pos = 0;
                        base = b;
                    }
                    None => return false,
                },
            }
        }
        let i = at.pos % CHUNK;
        // SAFETY: `base` is a live chunk of CHUNK slots and `i < CHUNK`.
        at.slot = unsafe { base.add(i) };
        at.left = (CHUNK - i).min(self.cap.load(Ordering::Relaxed) - at.pos);
        true
    }

    /// A new chunk, if the budget has room for it (after `make_room`, as
    /// long as that frees something).
    #[cold]
    fn grow(&self, chunk: &AtomicPtr<Slot>, make_room: fn() -> bool) -> Option<*mut Slot> {
        while !self.budget.reserve(CHUNK_BYTES) {
            if !make_room() {
                return None;
            }
        }
        let slots: Box<[Slot]> = (0..CHUNK).map(|_| Slot::default()).collect();
        let p = Box::into_raw(slots).cast::<Slot>();
        chunk.store(p, Ordering::Release);
        Some(p)
    }

    /// The budget is spent at `pos`, the start of a chunk not yet made:
    /// the ring becomes the `pos` slots made so far (`None` if none). Up to
    /// here the ring never wrapped, so `written == pos`: readers' `written
    /// % cap` stays the oldest slot.
    #[cold]
    fn shrink(&self, pos: usize) -> Option<*mut Slot> {
        if pos == 0 {
            return None;
        }
        // Release, before `written` passes it: a reader that sees the
        // larger count sees the smaller ring.
        self.cap.store(pos, Ordering::Release);
        Some(self.chunks[0].load(Ordering::Relaxed))
    }

    /// How many spans were dropped to make room (the oldest), or found no
    /// room at all.
    pub(crate) fn dropped(&self) -> u64 {
        let written = self.written.load(Ordering::Acquire);
        written.saturating_sub(self.cap.load(Ordering::Acquire) as u64)
            + self.lost.load(Ordering::Relaxed)
    }

    /// The spans kept, oldest first.
    pub(crate) fn spans(&self) -> Vec<SpanRecord> {
        let written = self.written.load(Ordering::Acquire);
        let cap = self.cap.load(Ordering::Acquire) as u64;
        let (first, n) = if written > cap {
            (written % cap, cap)
        } else {
            (0, written)
        };
        let r = Ordering::Relaxed;
        let mut out = Vec::with_capacity(n as usize);
        for k in 0..n {
            let pos = ((first + k) % cap) as usize;
            let base = self.chunks[pos / CHUNK].load(Ordering::Acquire);
            if base.is_null() {
                continue;
            }
            // SAFETY: as in `push`.
            let slot = unsafe { &*base.add(pos % CHUNK) };
            let meta = slot.meta.load(r);
            let (Some(kind), Some(name)) = (
                Kind::from_u8(meta as u8),
                // SAFETY: null, or a `&'static &'static str` stored whole.
                unsafe { slot.name.load(r).as_ref() },
            ) else {
                continue;
            };
            out.push(SpanRecord {
                kind,
                name,
                start: slot.start.load(r),
                end: slot.end.load(r),
                outcome: Outcome::from_u8((meta >> 8) as u8),
                bytes: if kind.has_words() {
                    [0, 1, 2, 3].map(|i| slot.bytes[i].load(r))
                } else {
                    [0; 4]
                },
            });
        }
        out
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        for c in &self.chunks {
            let p = c.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: made by `grow` from a boxed slice of CHUNK slots.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, CHUNK)) });
                self.budget.release(CHUNK_BYTES);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(i: u64) -> SpanRecord {
        SpanRecord {
            kind: Kind::Timed,
            name: &"s",
            start: i,
            end: i + 1,
            outcome: Outcome::Completed,
            bytes: [0; 4],
        }
    }

    #[test]
    fn keeps_the_newest_and_counts_the_dropped() {
        static BUDGET: Budget = Budget::new(usize::MAX);
        let b = Buffer::new(CHUNK + 3, 1, "t".into(), &BUDGET);
        let mut at = At::START;
        for i in 0..(CHUNK as u64 + 10) {
            b.push(&mut at, &span(i), || false);
        }
        let spans = b.spans();
        assert_eq!(spans.len(), CHUNK + 3);
        assert_eq!(b.dropped(), 7);
        assert_eq!(spans[0].start, 7, "the oldest kept is the eighth pushed");
        assert_eq!(spans.last().unwrap().start, CHUNK as u64 + 9);
        drop(b);
        assert_eq!(BUDGET.used(), 0, "a freed buffer gives its chunks back");
    }

    #[test]
    fn a_spent_budget_shrinks_the_ring_to_its_chunks_and_drops_the_oldest() {
        // Room for two chunks; the buffer would take four.
        static BUDGET: Budget = Budget::new(2 * CHUNK_BYTES);
        static ROOM_ASKED: AtomicU64 = AtomicU64::new(0);
        fn no_room() -> bool {
            ROOM_ASKED.fetch_add(1, Ordering::Relaxed);
            false
        }
        let b = Buffer::new(4 * CHUNK, 1, "t".into(), &BUDGET);
        let n = 2 * CHUNK as u64 + 5;
        let mut at = At::START;
        for i in 0..n {
            b.push(&mut at, &span(i), no_room);
        }
        assert_eq!(BUDGET.used(), 2 * CHUNK_BYTES, "never past the limit");
        assert_eq!(b.cap(), 2 * CHUNK, "the ring is the chunks it has");
        assert_eq!(ROOM_ASKED.load(Ordering::Relaxed), 1, "asked once");
        assert_eq!(b.dropped(), 5, "the oldest five, counted");
        let spans = b.spans();
        assert_eq!(spans.len(), 2 * CHUNK);
        assert_eq!(spans[0].start, 5, "oldest kept");
        assert_eq!(spans.last().unwrap().start, n - 1, "newest kept");
        assert!(spans.windows(2).all(|w| w[0].start + 1 == w[1].start));
        drop(b);
        assert_eq!(BUDGET.used(), 0);
    }

    #[test]
    fn with_no_room_at_all_spans_are_lost_and_counted() {
        static BUDGET: Budget = Budget::new(CHUNK_BYTES - 1);
        let b = Buffer::new(8, 1, "t".into(), &BUDGET);
        let mut at = At::START;
        for i in 0..3 {
            b.push(&mut at, &span(i), || false);
        }
        assert_eq!((b.spans().len(), b.dropped(), b.written()), (0, 3, 3));
    }

    #[test]
    fn room_made_by_the_caller_is_used() {
        static BUDGET: Budget = Budget::new(CHUNK_BYTES);
        // Holds the budget's one chunk, as an exited thread's buffer would.
        BUDGET.reserve(CHUNK_BYTES);
        fn free_it() -> bool {
            let had = BUDGET.used() > CHUNK_BYTES / 2 && BUDGET.used() == CHUNK_BYTES;
            if had {
                BUDGET.release(CHUNK_BYTES);
            }
            had
        }
        let b = Buffer::new(CHUNK, 1, "t".into(), &BUDGET);
        let mut at = At::START;
        b.push(&mut at, &span(0), free_it);
        assert_eq!((b.spans().len(), b.dropped()), (1, 0));
        assert_eq!(BUDGET.used(), CHUNK_BYTES);
    }
}
