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
        LABELS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id, label));
        Me { id }
    }
}

impl Drop for Me {
    fn drop(&mut self) {
        let mut labels = LABELS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = labels.iter().position(|(id, _)| *id == self.id) {
            labels.swap_remove(i);
        }
    }
}

thread_local! {
    static ME: Me = Me::new();
}

/// This thread's id for entries (0 if the thread is ending).
pub(crate) fn me() -> u64 {
    ME.try_with(|m| m.id).unwrap_or(0)
}

/// "thread worker-2", or what is known of a thread that has ended.
pub(crate) fn thread_label(id: u64) -> String {
    let labels = LABELS.lock().unwrap_or_else(PoisonError::into_inner);
    match labels.iter().find(|(i, _)| *i == id) {
        Some((_, label)) => format!("thread {label}"),
        None => "a thread that has ended".to_owned(),
    }
}

struct Entry<V> {
    id: u64,
    holder: u64,
    value: V,
    /// The thread it is active on (0: none, a suspended future's).
    active_on: u64,
    /// The thread that entered it, or that polled its future last.
    thread: u64,
}

struct State<S: Setting> {
    saved: Option<S::Saved>,
    entries: Vec<Entry<S::Value>>,
    /// Ticket ids; a new holder is named by its first ticket's id.
    next: u64,
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
                next: 1,
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
        let me_id = me();
        let mut st = self.lock();
        let id = st.next;
        let holder = st
            .entries
            .iter()
            .rev()
            .find(|e| e.active_on == me_id)
            .map_or(id, |e| e.holder);
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
        st.next += 1;
        st.entries.push(Entry {
            id,
            holder,
            value,
            active_on: me_id,
            thread: me_id,
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
        let me_id = me();
        let mut st = self.lock();
        if let Some(e) = st.entries.iter_mut().rev().find(|e| e.id == ticket.id) {
            e.active_on = me_id;
            e.thread = me_id;
        }
    }
}

/// `matmul_precision("medium") conflicts with matmul_precision("high")
/// held by thread worker-2`.
fn conflict<S: Setting>(value: &S::Value, other: &Entry<S::Value>, me_id: u64) -> ScopeError {
    let mine = S::describe(value);
    let theirs = S::describe(&other.value);
    let thread = thread_label(other.thread);
    let by = Holder {
        thread: &thread,
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
            write!(f, "a task last polled on {}", self.thread)
        } else if self.here {
            // Another task's entry, active on this thread: only a guard
            // held by hand across an `.await` gets here.
            write!(f, "another holder on this thread ({})", self.thread)
        } else {
            f.write_str(self.thread)
        }
    }
}

/// Guards that are right on any thread as long as
/// [`Scope::suspend`](crate::Scope::suspend) and
/// [`Scope::resume`](crate::Scope::resume) are called around each move, as
/// [`Spanned`](crate::Spanned) does: the guards of process-wide words,
/// `!Send` by themselves (see [`Held`]).
///
/// # Safety
/// Only for guards whose thread-bound part is the registry's record of
/// where they are active (kept right by `suspend` / `resume`), and whose
/// other fields are `Send`.
pub unsafe trait MovesWithTask {}

/// A guard's hold on one setting: leaves on drop, reporting a failed
/// restore to the exit hook under `word`.
///
/// `!Send`: its entry is active on the thread that entered it (scopes
/// entered later there nest in it). Moved to another thread by hand, it
/// would still count as that thread's. The macros' async code moves such
/// guards only inside `Task` (private), stepping them off and onto threads
/// around each poll.
pub(crate) struct Held<S: Setting> {
    ticket: Ticket,
    word: &'static str,
    _setting: std::marker::PhantomData<fn() -> S>,
    _not_send: crate::PhantomNotSend,
}

impl<S: Setting> Held<S> {
    pub(crate) fn enter(value: S::Value, word: &'static str) -> Result<Self, ScopeError> {
        S::registry().enter(value).map(|ticket| Held {
            ticket,
            word,
            _setting: std::marker::PhantomData,
            _not_send: crate::PhantomNotSend::NEW,
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
