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

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::report::Outcome;

/// Spans per chunk (56 KiB).
const CHUNK: usize = 1024;
/// How many slots ahead a push asks the cache for: the ring streams
/// through memory, and a slot not yet in cache costs the push a miss.
const AHEAD: usize = 4;

/// Asks for the cache line of slot `i` of the chunk at `base` (ignored past
/// the chunk's end, and where the CPU has no such hint).
#[inline(always)]
fn prefetch_for_write(base: *mut Slot, i: usize) {
    #[cfg(target_arch = "x86_64")]
    if i < CHUNK {
        // SAFETY: a prefetch never faults, and `base + i` is inside the chunk.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_ET0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_ET0>(base.add(i).cast::<i8>());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (base, i);
}

/// What made a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Timed = 1,
    Record = 2,
    HostMemory = 3,
    GpuMemory = 4,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Kind::Timed,
            2 => Kind::Record,
            3 => Kind::HostMemory,
            4 => Kind::GpuMemory,
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
        }
    }
}

fn outcome_to_u8(o: Outcome) -> u8 {
    match o {
        Outcome::Completed => 0,
        Outcome::Panicked => 1,
        Outcome::Failed => 2,
    }
}

fn outcome_from_u8(v: u8) -> Outcome {
    match v {
        1 => Outcome::Panicked,
        2 => Outcome::Failed,
        _ => Outcome::Completed,
    }
}

/// One finished span, as recorded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub kind: Kind,
    /// One word, so a slot's name can't tear (see `super::intern`).
    pub name: &'static &'static str,
    /// Raw clock readings (see `crate::clock`).
    pub start: u64,
    pub end: u64,
    pub outcome: Outcome,
    /// Memory scopes: bytes at entry, at exit, and the peak.
    pub bytes: [u64; 3],
}

#[derive(Default)]
struct Slot {
    start: AtomicU64,
    end: AtomicU64,
    name: AtomicPtr<&'static str>,
    /// Kind (low 8 bits) and outcome (bits 8..16).
    meta: AtomicU64,
    bytes: [AtomicU64; 3],
}

/// One thread's spans of one recording.
pub(crate) struct Buffer {
    /// The OS thread id, as Chrome traces and libtorch's profiler show it.
    pub tid: u64,
    pub thread_name: String,
    cap: usize,
    /// Spans pushed so far (more than `cap` once the oldest were dropped).
    written: AtomicU64,
    chunks: Box<[AtomicPtr<Slot>]>,
}

impl Buffer {
    pub(crate) fn new(cap: usize, tid: u64, thread_name: String) -> Self {
        let cap = cap.max(1);
        Self {
            tid,
            thread_name,
            cap,
            written: AtomicU64::new(0),
            chunks: (0..cap.div_ceil(CHUNK))
                .map(|_| AtomicPtr::default())
                .collect(),
        }
    }

    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// Writes `s` at ring position `pos` (`< cap`), the owner's cursor.
    /// Only the owning thread calls this.
    #[inline]
    pub(crate) fn push(&self, pos: usize, s: &Span) {
        let chunk = &self.chunks[pos / CHUNK];
        let mut base = chunk.load(Ordering::Relaxed);
        if base.is_null() {
            base = self.grow(chunk);
        }
        // SAFETY: `base` is a live chunk of CHUNK slots (freed only with
        // the buffer), and `pos % CHUNK < CHUNK`.
        let slot = unsafe { &*base.add(pos % CHUNK) };
        let r = Ordering::Relaxed;
        slot.start.store(s.start, r);
        slot.end.store(s.end, r);
        slot.name.store(std::ptr::from_ref(s.name).cast_mut(), r);
        let meta = s.kind as u64 | u64::from(outcome_to_u8(s.outcome)) << 8;
        slot.meta.store(meta, r);
        // Only memory spans carry bytes (the reader looks at no others').
        if matches!(s.kind, Kind::HostMemory | Kind::GpuMemory) {
            for (to, &b) in slot.bytes.iter().zip(&s.bytes) {
                to.store(b, r);
            }
        }
        let n = self.written.load(r);
        self.written.store(n + 1, Ordering::Release);
        prefetch_for_write(base, pos % CHUNK + AHEAD);
    }

    #[cold]
    fn grow(&self, chunk: &AtomicPtr<Slot>) -> *mut Slot {
        let slots: Box<[Slot]> = (0..CHUNK).map(|_| Slot::default()).collect();
        let p = Box::into_raw(slots).cast::<Slot>();
        chunk.store(p, Ordering::Release);
        p
    }

    /// How many spans were dropped to make room (the oldest).
    pub(crate) fn dropped(&self) -> u64 {
        self.written
            .load(Ordering::Acquire)
            .saturating_sub(self.cap as u64)
    }

    /// The spans kept, oldest first.
    pub(crate) fn spans(&self) -> Vec<Span> {
        let written = self.written.load(Ordering::Acquire);
        let cap = self.cap as u64;
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
            out.push(Span {
                kind,
                name,
                start: slot.start.load(r),
                end: slot.end.load(r),
                outcome: outcome_from_u8((meta >> 8) as u8),
                bytes: if matches!(kind, Kind::HostMemory | Kind::GpuMemory) {
                    [0, 1, 2].map(|i| slot.bytes[i].load(r))
                } else {
                    [0; 3]
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
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(i: u64) -> Span {
        Span {
            kind: Kind::Timed,
            name: &"s",
            start: i,
            end: i + 1,
            outcome: Outcome::Completed,
            bytes: [0; 3],
        }
    }

    #[test]
    fn keeps_the_newest_and_counts_the_dropped() {
        let b = Buffer::new(CHUNK + 3, 1, "t".into());
        let mut pos = 0;
        for i in 0..(CHUNK as u64 + 10) {
            b.push(pos, &span(i));
            pos = (pos + 1) % b.cap();
        }
        let spans = b.spans();
        assert_eq!(spans.len(), CHUNK + 3);
        assert_eq!(b.dropped(), 7);
        assert_eq!(spans[0].start, 7, "the oldest kept is the eighth pushed");
        assert_eq!(spans.last().unwrap().start, CHUNK as u64 + 9);
    }
}
