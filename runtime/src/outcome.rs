//! [`Outcome`]: how a scope's body ended, as its exit sees it.

use serde::Serialize;

/// How the body of a scope ended: what Python's `__exit__(exc_type, exc,
/// tb)` learns. A [`Scope`](crate::Scope) hears it in
/// [`Scope::exit`](crate::Scope::exit), a [`ScopeStack`](crate::ScopeStack)
/// callback in [`push_exit`](crate::ScopeStack::push_exit), `timed` and the
/// memory scopes record it.
///
/// Where each is known:
///
/// | how the body ended | attributed fn | `scoped!` / `try_scoped!` block |
/// |---|---|---|
/// | a value, by its end or a `return` | `Completed`, or `Failed` for an `Err` ¹ | `Completed` (the value is not looked at) |
/// | `return`, `break`, `continue` or `?` out of the block | — | `Completed`, as Python's `__exit__` hears `None` after a `return` out of a `with` |
/// | a panic | `Panicked` | `Panicked` |
/// | a later scope of the list could not be entered | `Failed` (a `Result` fn) or `Panicked` | `Failed` (`try_scoped!`) or `Panicked` (`scoped!`) |
/// | a `deadline` of the list passed | `Failed` (a `Result` fn) or `Panicked` | `Failed` (`try_scoped!`) or `Panicked` (`scoped!`) |
///
/// ¹ an `Err` by the tail, `return` or `?`, on a non-async function
/// returning `Result` whose list has a word that looks at the outcome
/// (`with`, `timed`, the memory scopes, `deadline`): the body runs as an
/// immediately called closure so that the expansion sees the value, which
/// keeps `?` and `return` meaning what they did. An `unsafe fn`, a
/// `#[track_caller]` fn and a return type with `impl Trait` in it keep the
/// body inline and report `Completed`. A block's value is not looked at
/// because its type may come from the context (`collect()`) or never
/// exist (a body that diverges); to report an `Err` from a block, use a
/// [`ScopeStack`](crate::ScopeStack) and
/// [`close`](crate::ScopeStack::close)`(Outcome::of(&result))`.
///
/// In async code (an `async fn`, a block that `.await`s, `in_scope`) the
/// scopes are entered around each poll and `exit` is not called.
///
/// `Panicked` is `std::thread::panicking()` at the exit: a scope entered
/// inside a `Drop` that runs during an unwind hears `Panicked` too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It ended without a panic, and without an `Err` the expansion saw.
    Completed,
    /// It panicked; a measurement covers the time until the unwind left
    /// the scope.
    Panicked,
    /// It returned an `Err`, or the scope list ended it with an error
    /// (see the table for where this is seen).
    Failed,
}

impl Outcome {
    /// `Failed` for an `Err`, `Completed` for an `Ok`: the outcome of a
    /// body whose value is `r` (for [`ScopeStack::close`](crate::ScopeStack::close)).
    ///
    /// ```
    /// use tch_scope::Outcome;
    /// assert_eq!(Outcome::of(&Err::<(), _>("no")), Outcome::Failed);
    /// assert_eq!(Outcome::of(&Ok::<_, ()>(1)), Outcome::Completed);
    /// ```
    pub fn of<T, E>(r: &Result<T, E>) -> Self {
        if r.is_err() {
            Outcome::Failed
        } else {
            Outcome::Completed
        }
    }

    /// The outcome as one lower-case word: `completed`, `panicked` or
    /// `failed` (as serde writes it, the trace's `args.outcome`, and the
    /// `outcome` label of the `metrics` feature).
    ///
    /// ```no_run
    /// assert_eq!(tch_scope::Outcome::Panicked.as_str(), "panicked");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Panicked => "panicked",
            Outcome::Failed => "failed",
        }
    }

    /// `Panicked` while unwinding, else `seen`.
    #[inline]
    pub(crate) fn at_exit_or(seen: Outcome) -> Self {
        if std::thread::panicking() {
            Outcome::Panicked
        } else {
            seen
        }
    }
}

impl Outcome {
    /// As one byte, for the lock-free records that store it in an atomic
    /// (the report's shards, the trace's slots).
    #[inline]
    pub(crate) fn to_u8(self) -> u8 {
        match self {
            Outcome::Completed => 0,
            Outcome::Panicked => 1,
            Outcome::Failed => 2,
        }
    }

    /// Back from [`to_u8`](Outcome::to_u8) (any other byte: `Completed`).
    #[inline]
    pub(crate) fn from_u8(v: u8) -> Outcome {
        match v {
            1 => Outcome::Panicked,
            2 => Outcome::Failed,
            _ => Outcome::Completed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Outcome;

    #[test]
    fn as_str_is_the_lower_case_word() {
        let words = [Outcome::Completed, Outcome::Panicked, Outcome::Failed].map(Outcome::as_str);
        assert_eq!(words, ["completed", "panicked", "failed"]);
    }
}
