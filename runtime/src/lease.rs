//! Leases: the open scopes of one piece of shared state (a process-wide
//! setting, one model's train/eval mode), oldest first, and who holds
//! each. `process_wide.rs` keeps one per setting,
//! `scopes/train` one per model; both decide with the same rules:
//!
//! - **Holders.** An entry made while an entry is *active on the current
//!   thread* belongs to that entry's holder (it is nested in it); any
//!   other entry starts a new holder, named by its first ticket. An entry
//!   is active on the thread that entered it until it ends, or until the
//!   task holding it suspends ([`Leases::step`] to thread 0) and resumes
//!   on another thread.
//! - **Conflicts.** A value that differs from one another holder has open
//!   is refused ([`Leases::conflict`]); one holder may nest other values.
//! - **In force.** The newest entry's value. An entry that leaves while
//!   newer ones are open changes nothing; the newest leaving hands over to
//!   the next newest, or to the state found before the first.
//!
//! The state itself (what to apply, what to save) is the caller's: a
//! `Leases` only records and decides. A [`Lane`] beside it takes the common
//! case (one thread, one value) without the lock; the lock's record adopts
//! what the lane holds whenever anything else happens.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::sync::lock;

mod lane;

pub(crate) use lane::{Lane, SLOT_TICKET, Taken};

// ---- who is a thread, for entries and messages ---------------------------------

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

/// The names of the threads that have used a setting, by their id here,
/// for messages; a thread's entry goes when it ends.
static LABELS: Mutex<Vec<(u64, Arc<str>)>> = Mutex::new(Vec::new());

/// This thread, as entries record it: an id (never 0), its label kept in
/// `LABELS` until the thread ends.
struct Me {
    id: u64,
}

impl Me {
    fn new() -> Self {
        let id = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
        let t = std::thread::current();
        let label: Arc<str> = match t.name() {
            Some(name) => name.into(),
            // `ThreadId(5)` → `5`.
            None => format!("{:?}", t.id())
                .trim_start_matches("ThreadId(")
                .trim_end_matches(')')
                .into(),
        };
        lock(&LABELS).push((id, label));
        Me { id }
    }
}

impl Drop for Me {
    fn drop(&mut self) {
        ME_ID.set(0);
        let mut labels = lock(&LABELS);
        if let Some(i) = labels.iter().position(|(id, _)| *id == self.id) {
            labels.swap_remove(i);
        }
    }
}

thread_local! {
    static ME: Me = Me::new();
    /// `ME`'s id while it lives, else 0: what the hot path reads, a plain
    /// cell (no destructor, so no check of the thread-local's state).
    static ME_ID: Cell<u64> = const { Cell::new(0) };
}

/// This thread's id for entries (0 if the thread is ending).
#[inline]
pub(crate) fn me() -> u64 {
    match ME_ID.get() {
        0 => me_slow(),
        id => id,
    }
}

/// The thread's first call, or one while it is torn down.
#[cold]
#[inline(never)]
fn me_slow() -> u64 {
    let id = ME.try_with(|m| m.id).unwrap_or(0);
    // Not while torn down: `ME` is gone (its drop set 0) or going.
    if id != 0 && ME.try_with(|_| ()).is_ok() {
        ME_ID.set(id);
    }
    id
}

/// "thread worker-2", or what is known of a thread that has ended.
pub(crate) fn thread_label(id: u64) -> String {
    let labels = lock(&LABELS);
    match labels.iter().find(|(i, _)| *i == id) {
        Some((_, label)) => format!("thread {label}"),
        None => "a thread that has ended".to_owned(),
    }
}

// ---- leases --------------------------------------------------------------------

/// One open scope.
pub(crate) struct Lease<V> {
    pub(crate) ticket: u64,
    holder: u64,
    pub(crate) value: V,
    /// The thread it is active on (0: none, a suspended task's).
    active_on: u64,
    /// The thread that entered it, or that polled its task last.
    thread: u64,
}

/// The open scopes of one piece of state, and the state found before the
/// first (`saved`, the caller's to fill and take).
pub(crate) struct Leases<V, Saved> {
    pub(crate) saved: Option<Saved>,
    entries: Vec<Lease<V>>,
    /// Ticket ids; a new holder is named by its first ticket's id.
    next: u64,
}

/// What leaving changed: the caller applies it.
pub(crate) enum Left<'a, V> {
    /// An older entry left, or the newest left a value equal to the next
    /// one's: nothing to apply.
    Nothing,
    /// The newest left: this value is in force again.
    Value(&'a V),
    /// The last left: put back the state before the first.
    Last,
}

impl<V, Saved> Leases<V, Saved> {
    pub(crate) const fn new() -> Self {
        Self {
            saved: None,
            entries: Vec::new(),
            next: 1,
        }
    }

    /// The holder a new entry made on thread `me` belongs to.
    pub(crate) fn holder(&self, me: u64) -> u64 {
        self.entries
            .iter()
            .rev()
            .find(|e| e.active_on == me)
            .map_or(self.next, |e| e.holder)
    }

    /// The newest entry of another holder than `holder` whose value is not
    /// `same` as `value`: a new entry asking for `value` would conflict.
    pub(crate) fn conflict(
        &self,
        holder: u64,
        value: &V,
        same: impl Fn(&V, &V) -> bool,
    ) -> Option<&Lease<V>> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.holder != holder && !same(&e.value, value))
    }

    /// The value in force: the newest entry's.
    pub(crate) fn in_force(&self) -> Option<&V> {
        self.entries.last().map(|e| &e.value)
    }

    /// Whether no entry is open.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The open entries, oldest first.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &Lease<V>> {
        self.entries.iter()
    }

    /// Opens an entry of `holder` on thread `me`; its ticket.
    pub(crate) fn push(&mut self, holder: u64, value: V, me: u64) -> u64 {
        let ticket = self.next;
        self.next += 1;
        self.entries.push(Lease {
            ticket,
            holder,
            value,
            active_on: me,
            thread: me,
        });
        ticket
    }

    /// Closes the entry of `ticket` (none: it was closed already).
    pub(crate) fn leave(&mut self, ticket: u64, same: impl Fn(&V, &V) -> bool) -> Left<'_, V> {
        let Some(i) = self.entries.iter().rposition(|e| e.ticket == ticket) else {
            return Left::Nothing;
        };
        let was_newest = i + 1 == self.entries.len();
        let gone = self.entries.remove(i);
        match self.entries.last() {
            _ if !was_newest => Left::Nothing,
            Some(e) if same(&e.value, &gone.value) => Left::Nothing,
            Some(e) => Left::Value(&e.value),
            None => Left::Last,
        }
    }

    /// Takes over a settled [`Lane`]'s slots: one holder (a lane's slots are
    /// one thread's scopes, each nested in the one before), active on the
    /// lane's thread, ticketed by slot. Called only while empty: a lane is
    /// biased only then, and settled before anything else is recorded.
    pub(crate) fn adopt(&mut self, t: Taken<V, Saved>)
    where
        V: Clone,
    {
        debug_assert!(
            self.entries.is_empty(),
            "a lane is biased only while its record is empty"
        );
        let holder = self.next;
        self.next += 1;
        if t.saved.is_some() {
            self.saved = t.saved;
        }
        let mut slots = t.slots;
        while slots != 0 {
            let slot = u64::from(slots.trailing_zeros());
            slots &= slots - 1;
            self.entries.push(Lease {
                ticket: SLOT_TICKET | slot,
                holder,
                value: t.value.clone(),
                active_on: t.thread,
                thread: t.thread,
            });
        }
    }

    /// The entry of `ticket` is now active on thread `to` (0: on none, its
    /// task suspended).
    pub(crate) fn step(&mut self, ticket: u64, to: u64) {
        if let Some(e) = self.entries.iter_mut().rev().find(|e| e.ticket == ticket) {
            e.active_on = to;
            if to != 0 {
                e.thread = to;
            }
        }
    }
}

impl<V> Lease<V> {
    /// Who holds it, for a conflict's message, as seen from thread `me`:
    /// `thread worker-2`, `a task last polled on thread 5`.
    pub(crate) fn holder_name(&self, me: u64) -> impl fmt::Display + use<V> {
        HolderName {
            thread: thread_label(self.thread),
            suspended: self.active_on == 0,
            here: self.active_on == me,
        }
    }
}

struct HolderName {
    thread: String,
    suspended: bool,
    here: bool,
}

impl fmt::Display for HolderName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.suspended {
            write!(f, "a task last polled on {}", self.thread)
        } else if self.here {
            // Another task's entry, active on this thread: only a guard
            // held by hand across an `.await` gets here.
            write!(f, "another holder on this thread ({})", self.thread)
        } else {
            f.write_str(&self.thread)
        }
    }
}
