//! Process-wide settings under concurrency: a record, per setting, of the
//! scopes open on it, so that scopes from many threads and tasks may
//! overlap and end in any order.
//!
//! A guard that saved the old value at entry and wrote it back at exit
//! would be right only for last-in-first-out exits: two threads whose
//! scopes overlap would each put back what the other set. Here each
//! setting ([`Setting`]) has one [`Registry`]: the value found before the
//! first open scope, and the open scopes, oldest first. Entering adds an
//! entry and applies its value; leaving removes *its own* entry and
//! applies the newest remaining value, or the value found before the
//! first, once none is left. The setting is written only when the value in
//! force changes.
//!
//! # Holders
//! Scopes of one *holder* nest as scopes always did: an inner scope may
//! set another value, which is in force until it ends. Scopes of two
//! holders share a value: a scope asking for another value while a
//! different holder has one open is refused at entry, with a
//! [`ScopeError`] naming both values and the thread of the other.
//!
//! Who is a holder: an entry made while an entry of the same setting is
//! *active on the current thread* belongs to that entry's holder (it is
//! nested in it); any other entry starts a new holder. An entry is active
//! on the thread that entered it until its guard drops — except a guard
//! that a [`Spanned`](crate::Spanned) future holds for its whole life
//! (the macros' async code): when a poll suspends, the future steps its
//! entries off the thread ([`Scope::suspend`](crate::Scope::suspend)), and
//! onto the thread of the next poll ([`Scope::resume`](crate::Scope::resume)).
//! So synchronous code on one thread is one holder however deep it nests,
//! an async task is one holder across the threads it moves between (and
//! the synchronous code it runs inside a poll nests in it), and two tasks
//! interleaved on one thread are two holders. A guard held by hand across
//! an `.await` (not through the macros or `in_span`) stays active on the
//! thread that entered it, so a task polled there meanwhile would count as
//! nested in it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::ScopeError;

/// A process-wide setting with a registry.
pub(crate) trait Setting: 'static {
    /// What one scope asks for.
    type Value: Clone + Send + 'static;
    /// The state before the first open scope, put back after the last.
    type Saved: Send + 'static;

    /// The setting's registry (a `static`).
    fn registry() -> &'static Registry<Self>
    where
        Self: Sized;

    /// Whether two values are the same setting (then two holders share it).
    fn same(a: &Self::Value, b: &Self::Value) -> bool;

    /// The value as the word that asked for it: `matmul_precision("high")`.
    fn describe(v: &Self::Value) -> String;

    /// Reads the state before the first scope.
    fn save() -> Result<Self::Saved, String>;

    /// Applies a value.
    fn set(v: &Self::Value) -> Result<(), String>;

    /// Puts the state read by [`save`](Setting::save) back.
    fn restore(saved: &Self::Saved) -> Result<(), String>;
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// This thread, as entries record it: an id (never 0) and a label for
/// messages ("worker-2", or the id).
pub(crate) struct Me {
    pub(crate) id: u64,
    pub(crate) label: Arc<str>,
}

thread_local! {
    static ME: Me = {
        let t = std::thread::current();
        let label: Arc<str> = match t.name() {
            Some(name) => name.into(),
            // `ThreadId(5)` → `5`.
            None => format!("{:?}", t.id())
                .trim_start_matches("ThreadId(")
                .trim_end_matches(')')
                .into(),
        };
        Me { id: next_id(), label }
    };
}

pub(crate) fn me<R>(f: impl FnOnce(&Me) -> R) -> R {
    ME.with(f)
}

struct Entry<V> {
    id: u64,
    holder: u64,
    value: V,
    /// The thread it is active on (0: none, a suspended future's).
    active_on: u64,
    /// The thread that entered it, or that polled its future last.
    thread: Arc<str>,
}

struct State<S: Setting> {
    saved: Option<S::Saved>,
    entries: Vec<Entry<S::Value>>,
}

/// The open scopes of one setting; see the [module docs](self).
pub(crate) struct Registry<S: Setting> {
    state: Mutex<State<S>>,
}

/// One open scope of a setting: removed, and the setting applied again,
/// by [`Registry::leave`]. Knows nothing of the thread: a guard holding it
/// may be dropped on any thread.
#[derive(Debug)]
pub(crate) struct Ticket {
    id: u64,
}

impl<S: Setting> Registry<S> {
    pub(crate) const fn new() -> Self {
        Self {
            state: Mutex::new(State {
                saved: None,
                entries: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<S>> {
        // A panic inside never leaves the state half-changed (every write
        // to it is a push, a remove or an assignment).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a scope asking for `value`. `scope` names the word for an
    /// error of libtorch's.
    ///
    /// # Errors
    /// Another holder has a different value open, or libtorch refused.
    pub(crate) fn enter(&self, value: S::Value) -> Result<Ticket, ScopeError> {
        let (me_id, me_label) = me(|m| (m.id, Arc::clone(&m.label)));
        let mut st = self.lock();
        let holder = st
            .entries
            .iter()
            .rev()
            .find(|e| e.active_on == me_id)
            .map_or_else(next_id, |e| e.holder);
        if let Some(other) = st
            .entries
            .iter()
            .rev()
            .find(|e| e.holder != holder && !S::same(&e.value, &value))
        {
            return Err(conflict::<S>(&value, other, me_id));
        }
        let in_force = st.entries.last().map(|e| &e.value);
        if in_force.is_none_or(|v| !S::same(v, &value)) {
            if st.saved.is_none() {
                st.saved =
                    Some(S::save().map_err(|e| ScopeError::new(S::describe(&value), None, e))?);
            }
            if let Err(e) = S::set(&value) {
                if st.entries.is_empty() {
                    st.saved = None;
                }
                return Err(ScopeError::new(S::describe(&value), None, e));
            }
        }
        let id = next_id();
        st.entries.push(Entry {
            id,
            holder,
            value,
            active_on: me_id,
            thread: me_label,
        });
        Ok(Ticket { id })
    }

    /// Closes the scope of `ticket`: its entry goes, and the newest
    /// remaining value (or the one before the first) is applied if it
    /// differs from the one in force.
    ///
    /// # Errors
    /// libtorch refused to apply it (the entry is gone anyway).
    pub(crate) fn leave(&self, ticket: &Ticket) -> Result<(), String> {
        let mut st = self.lock();
        let Some(i) = st.entries.iter().rposition(|e| e.id == ticket.id) else {
            return Ok(());
        };
        let was_newest = i + 1 == st.entries.len();
        let gone = st.entries.remove(i);
        if !was_newest {
            return Ok(());
        }
        match st.entries.last() {
            Some(e) if S::same(&e.value, &gone.value) => Ok(()),
            Some(e) => S::set(&e.value),
            None => match st.saved.take() {
                Some(saved) => S::restore(&saved),
                None => Ok(()),
            },
        }
    }

    /// The future holding `ticket` suspended: its entry is active on no
    /// thread.
    pub(crate) fn suspend(&self, ticket: &Ticket) {
        let mut st = self.lock();
        if let Some(e) = st.entries.iter_mut().rev().find(|e| e.id == ticket.id) {
            e.active_on = 0;
        }
    }

    /// The future holding `ticket` is polled on this thread.
    pub(crate) fn resume(&self, ticket: &Ticket) {
        let (me_id, me_label) = me(|m| (m.id, Arc::clone(&m.label)));
        let mut st = self.lock();
        if let Some(e) = st.entries.iter_mut().rev().find(|e| e.id == ticket.id) {
            e.active_on = me_id;
            e.thread = me_label;
        }
    }
}

/// `matmul_precision("medium") conflicts with matmul_precision("high")
/// held by thread worker-2`.
fn conflict<S: Setting>(value: &S::Value, other: &Entry<S::Value>, me_id: u64) -> ScopeError {
    let mine = S::describe(value);
    let theirs = S::describe(&other.value);
    let by = Holder {
        thread: &other.thread,
        suspended: other.active_on == 0,
        here: other.active_on == me_id,
    };
    ScopeError::new(
        mine.clone(),
        None,
        format!("{mine} conflicts with {theirs} held by {by}"),
    )
}

struct Holder<'a> {
    thread: &'a str,
    suspended: bool,
    here: bool,
}

impl fmt::Display for Holder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.suspended {
            write!(f, "a task last polled on thread {}", self.thread)
        } else if self.here {
            // Another task's entry, active on this thread: only a guard
            // held by hand across an `.await` gets here.
            write!(f, "another holder on this thread ({})", self.thread)
        } else {
            write!(f, "thread {}", self.thread)
        }
    }
}

/// A guard's hold on one setting: leaves on drop, reporting a failed
/// restore to the exit hook under `word`.
pub(crate) struct Held<S: Setting> {
    ticket: Ticket,
    word: &'static str,
    _setting: std::marker::PhantomData<fn() -> S>,
}

impl<S: Setting> Held<S> {
    pub(crate) fn enter(value: S::Value, word: &'static str) -> Result<Self, ScopeError> {
        S::registry().enter(value).map(|ticket| Held {
            ticket,
            word,
            _setting: std::marker::PhantomData,
        })
    }

    pub(crate) fn suspend(&self) {
        S::registry().suspend(&self.ticket);
    }

    pub(crate) fn resume(&self) {
        S::registry().resume(&self.ticket);
    }
}

impl<S: Setting> fmt::Debug for Held<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held")
            .field("word", &self.word)
            .field("ticket", &self.ticket.id)
            .finish()
    }
}

impl<S: Setting> Drop for Held<S> {
    fn drop(&mut self) {
        if let Err(e) = S::registry().leave(&self.ticket) {
            crate::exit::report(
                self.word,
                format_args!("could not put the {} setting back: {e}", self.word),
            );
        }
    }
}
