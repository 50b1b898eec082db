//! [`ScopeStack`]: `contextlib.ExitStack` — scopes chosen at run time.

use crate::{EntryError, Outcome, Scope, ScopeError};

/// An open scope or a callback: told the outcome, then dropped.
trait Exit {
    fn exit(&mut self, outcome: Outcome);
}

/// A scope entered by [`ScopeStack::enter`], with its `Scope::exit` (a
/// function pointer, so the stack needs only the guard to outlive it, not
/// the scope value).
struct Entered<G> {
    guard: G,
    exit: fn(&mut G, Outcome),
}

impl<G> Exit for Entered<G> {
    fn exit(&mut self, outcome: Outcome) {
        (self.exit)(&mut self.guard, outcome);
    }
}

/// A callback that runs when the stack unwinds to it.
struct OnExit<F>(Option<F>);

impl<F: FnOnce(Outcome)> Exit for OnExit<F> {
    fn exit(&mut self, outcome: Outcome) {
        if let Some(f) = self.0.take() {
            f(outcome);
        }
    }
}

/// Enters scopes picked at run time and leaves them in reverse order when
/// dropped, like Python's `contextlib.ExitStack`. The guarantees are those
/// of [`scoped!`](crate::scoped): every exit (end of block, `?`, panic)
/// leaves every scope, innermost first; the stack is `!Send`, since most
/// scopes are per thread.
///
/// Each scope's [`Scope::exit`] and each [`push_exit`](Self::push_exit)
/// callback hears an [`Outcome`]: `Panicked` when the stack drops during
/// a panic, the one given to [`close`](Self::close), and otherwise
/// `Completed` (a stack does not see the value of the code around it, so
/// an early `return` or `?` that drops it is `Completed` too; call
/// `close(Outcome::of(&result))` where that matters).
///
/// ```
/// use tch_scope::{NoGrad, ScopeStack, Seed, is_grad_enabled};
/// fn run(eval: bool, seed: Option<u64>) -> Result<bool, tch_scope::ScopeError> {
///     let mut stack = ScopeStack::new();
///     if eval {
///         stack.enter(NoGrad)?;
///     }
///     if let Some(n) = seed {
///         stack.enter(Seed(n))?;
///     }
///     Ok(is_grad_enabled())
/// } // the stack leaves `seed`, then `no_grad`
/// assert_eq!(run(true, Some(1)), Ok(false));
/// assert_eq!(run(false, None), Ok(true));
/// assert!(is_grad_enabled());
/// ```
#[must_use = "a ScopeStack leaves its scopes when dropped; bind it with `let mut stack = …`"]
#[derive(Default)]
pub struct ScopeStack<'a> {
    guards: Vec<Box<dyn Exit + 'a>>,
    _not_send: crate::PhantomNotSend,
}

impl std::fmt::Debug for ScopeStack<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopeStack")
            .field("len", &self.guards.len())
            .finish()
    }
}

impl<'a> ScopeStack<'a> {
    /// An empty stack.
    ///
    /// ```no_run
    /// assert!(tch_scope::ScopeStack::new().is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Enters `scope` (`ExitStack.enter_context`); it is left when the
    /// stack drops or [`pop`](Self::pop)s it. Scopes that borrow (an
    /// `eval(model)` [`Mode`](crate::Mode)) keep their borrow for the
    /// stack's lifetime `'a`.
    ///
    /// # Errors
    /// The scope's [`ScopeError`]; the stack is unchanged.
    ///
    /// ```no_run
    /// use tch_scope::{InferenceMode, ScopeStack, is_inference_mode_enabled};
    /// let mut stack = ScopeStack::new();
    /// stack.enter(InferenceMode).unwrap();
    /// assert!(is_inference_mode_enabled());
    /// drop(stack);
    /// assert!(!is_inference_mode_enabled());
    /// ```
    pub fn enter<S: Scope>(&mut self, mut scope: S) -> Result<(), ScopeError>
    where
        S::Guard: 'a,
    {
        let guard = scope.enter().map_err(EntryError::into_scope_error)?;
        self.guards.push(Box::new(Entered {
            guard,
            exit: S::exit,
        }));
        Ok(())
    }

    /// Runs `f` when the stack unwinds to this point (`ExitStack.callback`).
    ///
    /// ```no_run
    /// use std::cell::Cell;
    /// let done = Cell::new(false);
    /// let mut stack = tch_scope::ScopeStack::new();
    /// stack.callback(|| done.set(true));
    /// drop(stack);
    /// assert!(done.get());
    /// ```
    pub fn callback(&mut self, f: impl FnOnce() + 'a) {
        self.push_exit(|_| f());
    }

    /// Runs `f` with the [`Outcome`] when the stack unwinds to this point
    /// (`ExitStack.push`, whose callback gets the exception).
    ///
    /// ```no_run
    /// use std::cell::Cell;
    /// use tch_scope::{Outcome, ScopeStack};
    /// let seen = Cell::new(None);
    /// let mut stack = ScopeStack::new();
    /// stack.push_exit(|o| seen.set(Some(o)));
    /// stack.close(Outcome::Failed);
    /// assert_eq!(seen.get(), Some(Outcome::Failed));
    /// ```
    pub fn push_exit(&mut self, f: impl FnOnce(Outcome) + 'a) {
        self.guards.push(Box::new(OnExit(Some(f))));
    }

    /// Moves every open scope and callback into a new stack and leaves
    /// this one empty (`ExitStack.pop_all`): set scopes up, and hand them
    /// on only once all of them are in.
    ///
    /// ```no_run
    /// use tch_scope::{NoGrad, ScopeStack, is_grad_enabled};
    /// fn setup() -> Result<ScopeStack<'static>, tch_scope::ScopeError> {
    ///     let mut stack = ScopeStack::new();
    ///     stack.enter(NoGrad)?;
    ///     // … more scopes; an error here would leave them all …
    ///     Ok(stack.pop_all())
    /// }
    /// let kept = setup().unwrap();
    /// assert!(!is_grad_enabled());
    /// drop(kept);
    /// assert!(is_grad_enabled());
    /// ```
    pub fn pop_all(&mut self) -> ScopeStack<'a> {
        ScopeStack {
            guards: std::mem::take(&mut self.guards),
            _not_send: crate::PhantomNotSend::NEW,
        }
    }

    /// Leaves every scope now, innermost first, each hearing `outcome`
    /// (`Panicked` instead while a panic unwinds).
    ///
    /// ```no_run
    /// use tch_scope::{NoGrad, Outcome, ScopeStack, is_grad_enabled};
    /// let mut stack = ScopeStack::new();
    /// stack.enter(NoGrad).unwrap();
    /// let result: Result<u8, String> = Err("bad batch".into());
    /// stack.close(Outcome::of(&result));
    /// assert!(is_grad_enabled());
    /// ```
    pub fn close(mut self, outcome: Outcome) {
        self.leave(Outcome::at_exit_or(outcome));
    }

    fn leave(&mut self, outcome: Outcome) {
        // A Vec drops first-to-last; scopes must be left last-to-first.
        while let Some(mut g) = self.guards.pop() {
            g.exit(outcome);
        }
    }

    /// Leaves the innermost scope now (its exit hears `Completed`); `false`
    /// if the stack is empty.
    ///
    /// ```no_run
    /// use tch_scope::{NoGrad, ScopeStack, is_grad_enabled};
    /// let mut stack = ScopeStack::new();
    /// stack.enter(NoGrad).unwrap();
    /// assert!(stack.pop());
    /// assert!(is_grad_enabled());
    /// assert!(!stack.pop());
    /// ```
    pub fn pop(&mut self) -> bool {
        let Some(mut g) = self.guards.pop() else {
            return false;
        };
        g.exit(Outcome::at_exit_or(Outcome::Completed));
        true
    }

    /// How many scopes are open.
    ///
    /// ```no_run
    /// assert_eq!(tch_scope::ScopeStack::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.guards.len()
    }

    /// Whether no scope is open.
    ///
    /// ```no_run
    /// assert!(tch_scope::ScopeStack::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }
}

impl Drop for ScopeStack<'_> {
    fn drop(&mut self) {
        self.leave(Outcome::at_exit_or(Outcome::Completed));
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::ScopeStack;
    use crate::is_inference_mode_enabled as inference;
    use crate::{InferenceMode, NoGrad, Outcome, ScopeError, is_grad_enabled};

    #[test]
    fn new_enter_len_pop() {
        let mut stack = ScopeStack::new();
        assert_eq!((stack.is_empty(), stack.len()), (true, 0));
        stack.enter(InferenceMode).unwrap();
        assert!(inference() && stack.len() == 1);
        drop(stack);
        assert!(!inference());

        let mut stack = ScopeStack::new();
        stack.enter(NoGrad).unwrap();
        assert!(stack.pop());
        assert!(is_grad_enabled() && stack.is_empty());
        assert!(!stack.pop());
    }

    #[test]
    fn callbacks_hear_the_outcome_given_to_close() {
        let (done, seen) = (Cell::new(false), Cell::new(None));
        let mut stack = ScopeStack::new();
        stack.enter(NoGrad).unwrap();
        stack.callback(|| done.set(true));
        stack.push_exit(|o| seen.set(Some(o)));
        stack.close(Outcome::of(&Err::<u8, _>("bad batch")));
        assert!(done.get() && is_grad_enabled());
        assert_eq!(seen.get(), Some(Outcome::Failed));
    }

    #[test]
    fn pop_all_hands_the_scopes_on() {
        fn setup() -> Result<ScopeStack<'static>, ScopeError> {
            let mut stack = ScopeStack::new();
            stack.enter(NoGrad)?;
            Ok(stack.pop_all())
        }
        let kept = setup().unwrap();
        assert!(!is_grad_enabled() && kept.len() == 1);
        drop(kept);
        assert!(is_grad_enabled());
    }
}
