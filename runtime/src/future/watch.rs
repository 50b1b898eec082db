//! Debug builds: a per-thread scope held across a suspension it could not
//! see is reported, loudly, instead of leaking into other tasks.
//!
//! `scoped!` picks its per-poll form from the `.await`s it can see. One
//! hidden in the user's own `macro_rules!` is invisible to it, so the body
//! gets flat guards, and those stay entered while the task is suspended:
//! every other task polled on the thread runs inside them (grad mode off
//! in a neighbour's forward, on a current-thread runtime or a `LocalSet`).
//! For bodies that may hide one (a macro call it doesn't know), `scoped!`
//! adds a [`Watch`]; the scoped futures ([`Scoped`](super::Scoped),
//! [`Spanned`](super::Spanned): awaiting `scoped!` bodies, attributed
//! `async fn`s, `in_scope`) check the watches around each poll:
//!
//! - when a poll returns, no watch opened during it may still be open: a
//!   guard entered inside a poll outlives the poll only by being held in a
//!   suspended future, so this never fires on correct code;
//! - when a poll starts, no watch opened at the same depth of scoped polls
//!   may be open: its guard belongs to a suspended task, or to code that
//!   drives futures to completion inside a macro the body calls (a
//!   `block_on`; the message says how to write that).
//!
//! Release builds keep none of it: [`Watch`] is a zero-sized type and the
//! polls make no call.

#[cfg(debug_assertions)]
use std::panic::Location;

/// A `scoped!` body that may hide an `.await`, open on this thread while
/// it lives (so `!Send`, like the guards it watches). Zero-sized, doing
/// nothing, in release builds.
#[must_use = "a watch is closed when dropped; bind it with `let _watch = …`"]
pub struct Watch {
    #[cfg(debug_assertions)]
    id: u64,
    _not_send: crate::PhantomNotSend,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").finish_non_exhaustive()
    }
}

/// Opens a watch over the flat per-thread guards of a `scoped!` body that
/// calls a macro which may `.await`: `words` are those scopes as written,
/// `name` the macro (`scoped!`), the caller's location its site.
#[inline]
#[cfg_attr(debug_assertions, track_caller)]
pub fn watch_hidden_await(name: &'static str, words: &'static str) -> Watch {
    #[cfg(debug_assertions)]
    {
        imp::open(name, words, Location::caller())
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = (name, words);
        Watch {
            _not_send: crate::PhantomNotSend::NEW,
        }
    }
}

#[cfg(debug_assertions)]
impl Drop for Watch {
    fn drop(&mut self) {
        imp::close(self.id);
    }
}

/// Around one poll of a scoped future: see the module docs. A no-op in
/// release builds.
pub(crate) struct PollWatch {
    #[cfg(debug_assertions)]
    depth: u32,
}

impl PollWatch {
    /// Checks that no watch of this depth is open, and counts the poll.
    #[inline(always)]
    pub(crate) fn start() -> Self {
        #[cfg(debug_assertions)]
        {
            PollWatch {
                depth: imp::start(),
            }
        }
        #[cfg(not(debug_assertions))]
        {
            PollWatch {}
        }
    }

    /// Checks, as the poll returns normally, that every watch opened in it
    /// is closed (the count is restored by `drop`, on unwinding too).
    #[inline(always)]
    pub(crate) fn returning(&self) {
        #[cfg(debug_assertions)]
        imp::returning(self.depth);
    }
}

#[cfg(debug_assertions)]
impl Drop for PollWatch {
    fn drop(&mut self) {
        imp::end(self.depth);
    }
}

#[cfg(debug_assertions)]
mod imp {
    use std::cell::{Cell, RefCell};
    use std::panic::Location;

    use super::Watch;

    struct Open {
        id: u64,
        name: &'static str,
        words: &'static str,
        site: &'static Location<'static>,
        /// Scoped polls running on the thread when it opened.
        depth: u32,
    }

    thread_local! {
        static DEPTH: Cell<u32> = const { Cell::new(0) };
        static NEXT: Cell<u64> = const { Cell::new(0) };
        static OPEN: RefCell<Vec<Open>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn open(
        name: &'static str,
        words: &'static str,
        site: &'static Location<'static>,
    ) -> Watch {
        let id = NEXT.with(|n| {
            n.set(n.get() + 1);
            n.get()
        });
        let depth = DEPTH.with(Cell::get);
        OPEN.with_borrow_mut(|o| {
            o.push(Open {
                id,
                name,
                words,
                site,
                depth,
            });
        });
        Watch {
            id,
            _not_send: crate::PhantomNotSend::NEW,
        }
    }

    pub(super) fn close(id: u64) {
        // `try_with`: a watch in a task dropped as the thread exits.
        let _ = OPEN.try_with(|o| {
            let mut o = o.borrow_mut();
            if let Some(i) = o.iter().rposition(|w| w.id == id) {
                o.remove(i);
            }
        });
    }

    /// The first watch opened at `depth` or deeper, as a report.
    fn leaked(depth: u32, when: &str) -> Option<String> {
        OPEN.with_borrow(|o| o.iter().find(|w| w.depth >= depth).map(|w| report(w, when)))
    }

    pub(super) fn start() -> u32 {
        let depth = DEPTH.with(Cell::get);
        if let Some(report) = leaked(depth, "while this thread starts polling a scoped future") {
            panic!("{report}");
        }
        DEPTH.with(|d| d.set(depth + 1));
        depth
    }

    pub(super) fn returning(depth: u32) {
        if std::thread::panicking() {
            return;
        }
        if let Some(report) = leaked(depth + 1, "as the scoped poll around it returns") {
            panic!("{report}");
        }
    }

    pub(super) fn end(depth: u32) {
        let _ = DEPTH.try_with(|d| d.set(depth));
    }

    fn report(w: &Open, when: &str) -> String {
        let Open {
            name, words, site, ..
        } = w;
        format!(
            "`{words}` entered by `{name}` at {site} is still entered {when}: its body \
             awaited inside a macro that `{name}` cannot see into, so the scope was held \
             across that await instead of being re-entered on every poll, and other tasks \
             on this thread would run inside it. Write one visible `.await` in the body \
             (`async {{ my_macro!(..) }}.await`), or put the scope on the async fn \
             (`#[no_grad] async fn ...`). If that macro instead runs a future to completion \
             (a `block_on`), call it outside the `{name}` body or from a function. \
             (Checked in debug builds only.)"
        )
    }
}
