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
//! an `.await` (not through the macros or `in_scopes`) stays active on the
//! thread that entered it, so a task polled there meanwhile would count as
//! nested in it.

use std::fmt;
use std::sync::Mutex;

use crate::ScopeError;
use crate::lease::{Leases, Left, me};
use crate::sync::lock;

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

/// One open scope of a setting: removed, and the setting applied again,
/// by [`Registry::leave`]. Knows nothing of the thread: a guard holding it
/// may be dropped on any thread.
#[derive(Debug)]
pub(crate) struct Ticket {
    id: u64,
}

/// The open scopes of one setting; see the [module docs](self).
pub(crate) struct Registry<S: Setting> {
    leases: Mutex<Leases<S::Value, S::Saved>>,
}

impl<S: Setting> Registry<S> {
    pub(crate) const fn new() -> Self {
        Self {
            leases: Mutex::new(Leases::new()),
        }
    }

    /// Opens a scope asking for `value`.
    ///
    /// # Errors
    /// Another holder has a different value open, or libtorch refused.
    pub(crate) fn enter(&self, value: S::Value) -> Result<Ticket, ScopeError> {
        let me_id = me();
        let mut leases = lock(&self.leases);
        let holder = leases.holder(me_id);
        if let Some(other) = leases.conflict(holder, &value, S::same) {
            let (mine, theirs) = (S::describe(&value), S::describe(&other.value));
            let by = other.holder_name(me_id);
            return Err(ScopeError::new(
                mine.clone(),
                None,
                format!("{mine} conflicts with {theirs} held by {by}"),
            ));
        }
        if leases.in_force().is_none_or(|v| !S::same(v, &value)) {
            if leases.saved.is_none() {
                let saved = S::save().map_err(|e| ScopeError::new(S::describe(&value), None, e))?;
                leases.saved = Some(saved);
            }
            if let Err(e) = S::set(&value) {
                if leases.is_empty() {
                    leases.saved = None;
                }
                return Err(ScopeError::new(S::describe(&value), None, e));
            }
        }
        let id = leases.push(holder, value, me_id);
        Ok(Ticket { id })
    }

    /// Closes the scope of `ticket`: its entry goes, and the newest
    /// remaining value (or the one before the first) is applied if it
    /// differs from the one in force.
    ///
    /// # Errors
    /// libtorch refused to apply it (the entry is gone anyway).
    pub(crate) fn leave(&self, ticket: &Ticket) -> Result<(), String> {
        let mut leases = lock(&self.leases);
        match leases.leave(ticket.id, S::same) {
            Left::Nothing => Ok(()),
            Left::Value(v) => S::set(v),
            Left::Last => match leases.saved.take() {
                Some(saved) => S::restore(&saved),
                None => Ok(()),
            },
        }
    }

    /// The future holding `ticket` suspended: its entry is active on no
    /// thread.
    pub(crate) fn suspend(&self, ticket: &Ticket) {
        lock(&self.leases).step(ticket.id, 0);
    }

    /// The future holding `ticket` is polled on this thread.
    pub(crate) fn resume(&self, ticket: &Ticket) {
        let me_id = me();
        lock(&self.leases).step(ticket.id, me_id);
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
