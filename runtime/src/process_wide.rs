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
//!
//! # Without the lock
//! The common case — one thread entering and leaving scopes of one value,
//! nested or in a loop — goes by the setting's [`Lane`] (`lease/lane.rs`):
//! no lock and no read-modify-write, only the setting's own libtorch calls
//! ([`Setting::swap`] on the first scope, [`Setting::restore`] after the
//! last). Any other step takes the lock, which first moves the lane's open
//! scopes into the record, so the rules above hold unchanged.

use std::fmt;
use std::sync::{Mutex, MutexGuard};

use crate::ScopeError;
use crate::lease::{Lane, Leases, Left, me};
use crate::sync::lock;

/// A process-wide setting with a registry.
pub(crate) trait Setting: 'static {
    /// The word, for a guard that names it by its setting ([`Fixed`]).
    const WORD: &'static str = "process-wide";

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

    /// A code for the lock-free lane: equal codes only for values equal in
    /// every respect (what [`same`](Setting::same), `describe` and `set`
    /// see), since the lane keeps one value for all its scopes. `None`, the
    /// default, keeps every scope of the value on the lock.
    fn code(_v: &Self::Value) -> Option<u8> {
        None
    }

    /// Reads the state and applies `v`, what the first scope does: one
    /// libtorch call where the shim has one. The default is
    /// [`save`](Setting::save) then [`set`](Setting::set).
    fn swap(v: &Self::Value) -> Result<Self::Saved, String> {
        let saved = Self::save()?;
        Self::set(v)?;
        Ok(saved)
    }
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
    lane: Lane<S::Value, S::Saved>,
}

impl<S: Setting> Registry<S> {
    pub(crate) const fn new() -> Self {
        Self {
            leases: Mutex::new(Leases::new()),
            lane: Lane::new(),
        }
    }

    /// Opens a scope asking for `value`.
    ///
    /// # Errors
    /// Another holder has a different value open, or libtorch refused.
    #[inline]
    pub(crate) fn enter(&self, value: S::Value) -> Result<Ticket, ScopeError> {
        let me_id = me();
        if let Some(code) = S::code(&value)
            && let Some(r) = self.lane.enter(me_id, 0, code, &value, swap::<S>)
        {
            return r
                .map(|id| Ticket { id })
                .map_err(|e| refused::<S>(&value, e));
        }
        self.enter_locked(me_id, value)
    }

    #[inline(never)]
    fn enter_locked(&self, me_id: u64, value: S::Value) -> Result<Ticket, ScopeError> {
        let mut leases = self.locked(me_id);
        if leases.is_empty() && leases.saved.is_none() {
            let first = S::code(&value)
                .and_then(|code| self.lane.acquire(me_id, 0, code, &value, swap::<S>));
            if let Some(r) = first {
                return r
                    .map(|id| Ticket { id })
                    .map_err(|e| refused::<S>(&value, e));
            }
        }
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
    #[inline]
    pub(crate) fn leave(&self, ticket: &Ticket) -> Result<(), String> {
        let me_id = me();
        let last = |last, saved: &mut Option<S::Saved>| match saved.take() {
            Some(saved) if last => S::restore(&saved),
            // Not the last: it stays for the last.
            kept => {
                *saved = kept;
                Ok(())
            }
        };
        match self.lane.leave(me_id, 0, ticket.id, last) {
            Some(r) => r,
            None => self.leave_locked(me_id, ticket),
        }
    }

    #[inline(never)]
    fn leave_locked(&self, me_id: u64, ticket: &Ticket) -> Result<(), String> {
        let mut leases = self.locked(me_id);
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
        self.locked(me()).step(ticket.id, 0);
    }

    /// The future holding `ticket` is polled on this thread.
    pub(crate) fn resume(&self, ticket: &Ticket) {
        let me_id = me();
        self.locked(me_id).step(ticket.id, me_id);
    }

    /// The record, locked, with whatever the lane held moved into it.
    fn locked(&self, me_id: u64) -> MutexGuard<'_, Leases<S::Value, S::Saved>> {
        let mut leases = lock(&self.leases);
        if let Some(taken) = self.lane.settle(me_id, 0) {
            leases.adopt(taken);
        }
        leases
    }
}

/// The lane's first scope: the state saved, for the lane to keep.
#[inline]
fn swap<S: Setting>(v: &S::Value) -> Result<Option<S::Saved>, String> {
    S::swap(v).map(Some)
}

/// libtorch refused `value` (out of line: the lane's path stays small).
#[cold]
#[inline(never)]
fn refused<S: Setting>(value: &S::Value, e: String) -> ScopeError {
    ScopeError::new(S::describe(value), None, e)
}

/// Guards that are right on any thread as long as
/// [`Scope::suspend`](crate::Scope::suspend) and
/// [`Scope::resume`](crate::Scope::resume) are called around each move, as
/// [`Spanned`](crate::Spanned) does: the guards of process-wide words,
/// `!Send` by themselves (see `Held`, private), and a `checkpoint`'s (its
/// metric log on the thread's stack of open logs).
///
/// # Safety
/// Only for guards whose thread-bound part is a per-thread record of
/// where they are active (the registry's, or the open logs), kept right by
/// `suspend` / `resume`, and whose other fields are `Send`.
pub unsafe trait MovesWithTask {}

/// How a [`Held`] names its word for a failed restore: the word itself, or
/// [`Fixed`].
pub(crate) trait Word: Copy {
    /// The word, for setting `S`.
    fn word<S: Setting>(self) -> &'static str;
}

impl Word for &'static str {
    fn word<S: Setting>(self) -> &'static str {
        self
    }
}

/// The setting's own [`Setting::WORD`]: no bytes in the guard, which then
/// moves in registers (a word is two).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fixed;

impl Word for Fixed {
    fn word<S: Setting>(self) -> &'static str {
        S::WORD
    }
}

/// A guard's hold on one setting: leaves on drop, reporting a failed
/// restore to the exit hook under its word.
///
/// `!Send`: its entry is active on the thread that entered it (scopes
/// entered later there nest in it). Moved to another thread by hand, it
/// would still count as that thread's. The macros' async code moves such
/// guards only inside `Task` (private), stepping them off and onto threads
/// around each poll.
pub(crate) struct Held<S: Setting, W: Word = &'static str> {
    ticket: Ticket,
    word: W,
    _setting: std::marker::PhantomData<fn() -> S>,
    _not_send: crate::PhantomNotSend,
}

impl<S: Setting, W: Word> Held<S, W> {
    #[inline]
    pub(crate) fn enter(value: S::Value, word: W) -> Result<Self, ScopeError> {
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

impl<S: Setting, W: Word> fmt::Debug for Held<S, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held")
            .field("word", &self.word.word::<S>())
            .field("ticket", &self.ticket.id)
            .finish()
    }
}

impl<S: Setting, W: Word> Drop for Held<S, W> {
    #[inline]
    fn drop(&mut self) {
        if let Err(e) = S::registry().leave(&self.ticket) {
            not_put_back(self.word.word::<S>(), &e);
        }
    }
}

#[cold]
#[inline(never)]
fn not_put_back(word: &'static str, e: &str) {
    crate::exit::report(
        word,
        format_args!("could not put the {word} setting back: {e}"),
    );
}

#[cfg(test)]
mod tests;
