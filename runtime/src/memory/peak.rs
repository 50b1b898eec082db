//! True peaks for nested and sibling scopes over one resettable counter.

use std::sync::Mutex;

use crate::report::lock;

/// A memory counter with a resettable high-water mark.
pub(crate) trait Counter {
    /// Bytes in use now (on its own: may be cheaper than [`read`](Self::read)).
    fn current(&self) -> Result<u64, String>;
    /// Bytes in use now and the highest since the last reset (or ever),
    /// read together.
    fn read(&self) -> Result<(u64, u64), String>;
    /// Resets the high-water mark to `current`; `Ok(false)` if this
    /// counter cannot be reset.
    fn reset_peak(&self) -> Result<bool, String>;
}

/// The scopes open on one counter, each with its running peak.
#[derive(Default)]
pub(crate) struct Tracker {
    open: Mutex<(u64, Vec<(u64, u64)>)>,
}

/// An open scope's ticket: its id and what was in use at entry.
pub(crate) struct Ticket {
    id: u64,
    pub at_entry: u64,
    pub scoped: bool,
}

impl Tracker {
    pub(crate) const fn new() -> Self {
        Self {
            open: Mutex::new((0, Vec::new())),
        }
    }

    /// Opens a scope: folds the counter's peak so far into every open scope
    /// (if any: with none open, the old peak concerns nobody), then resets
    /// it, so this scope starts from what is in use now.
    pub(crate) fn enter(&self, c: &dyn Counter) -> Result<Ticket, String> {
        let mut g = lock(&self.open);
        let (next, open) = &mut *g;
        if !open.is_empty() {
            let (_, peak) = c.read()?;
            for (_, p) in open.iter_mut() {
                *p = (*p).max(peak);
            }
        }
        let scoped = c.reset_peak()?;
        let at_entry = c.current()?;
        let start = if scoped {
            at_entry
        } else {
            c.read()?.1.max(at_entry)
        };
        *next += 1;
        open.push((*next, start));
        Ok(Ticket {
            id: *next,
            at_entry,
            scoped,
        })
    }

    /// Closes a scope: folds the counter's peak into every open scope (the
    /// outer ones keep it) and returns this one's peak and what is in use.
    pub(crate) fn exit(&self, c: &dyn Counter, t: &Ticket) -> Result<(u64, u64), String> {
        let mut g = lock(&self.open);
        let open = &mut g.1;
        let read = c.read();
        let pos = open.iter().position(|(id, _)| *id == t.id);
        let mine = pos.map(|i| open.remove(i).1).unwrap_or(t.at_entry);
        let (current, peak) = read?;
        for (_, p) in open.iter_mut() {
            *p = (*p).max(peak);
        }
        Ok((mine.max(peak), current))
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// A fake allocator: `alloc`/`free` move `current`, `peak` follows.
    #[derive(Default)]
    struct Fake {
        current: Cell<u64>,
        peak: Cell<u64>,
    }
    impl Fake {
        fn alloc(&self, n: u64) {
            self.current.set(self.current.get() + n);
            self.peak.set(self.peak.get().max(self.current.get()));
        }
        fn free(&self, n: u64) {
            self.current.set(self.current.get() - n);
        }
    }
    impl Counter for Fake {
        fn current(&self) -> Result<u64, String> {
            Ok(self.current.get())
        }
        fn read(&self) -> Result<(u64, u64), String> {
            Ok((self.current.get(), self.peak.get()))
        }
        fn reset_peak(&self) -> Result<bool, String> {
            self.peak.set(self.current.get());
            Ok(true)
        }
    }

    #[test]
    fn nested_and_sibling_peaks_are_each_true() {
        let (t, c) = (Tracker::new(), Fake::default());
        let outer = t.enter(&c).unwrap();
        c.alloc(100);
        c.free(100); // outer's own peak: +100, before any inner reset
        let a = t.enter(&c).unwrap();
        c.alloc(30);
        c.free(30);
        let peak_a = t.exit(&c, &a).unwrap().0;
        let b = t.enter(&c).unwrap();
        c.alloc(500); // the largest, inside the second sibling
        c.free(500);
        let peak_b = t.exit(&c, &b).unwrap().0;
        c.alloc(10);
        let peak_outer = t.exit(&c, &outer).unwrap().0;
        assert_eq!((peak_a, peak_b, peak_outer), (30, 500, 500));
        // The naive pattern would give the outer scope 10.
    }

    #[test]
    fn out_of_order_exit_from_other_threads() {
        let (t, c) = (Tracker::new(), Fake::default());
        let x = t.enter(&c).unwrap();
        c.alloc(50);
        let y = t.enter(&c).unwrap();
        c.alloc(20);
        let px = t.exit(&c, &x).unwrap().0; // x closes first
        c.free(70);
        let py = t.exit(&c, &y).unwrap().0;
        assert_eq!((px, py), (70, 70));
    }
}
