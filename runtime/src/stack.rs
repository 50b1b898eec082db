//! [`ScopeStack`]: `contextlib.ExitStack` — scopes chosen at run time.

use std::marker::PhantomData;

use crate::{EntryError, Scope, ScopeError};

/// A scope's guard (or a callback), held only for its `Drop`.
trait Guard {}
impl<T> Guard for T {}

/// Enters scopes picked at run time and leaves them in reverse order when
/// dropped, like Python's `contextlib.ExitStack`. The guarantees are those
/// of [`scoped!`](crate::scoped): every exit (end of block, `?`, panic)
/// leaves every scope, innermost first; the stack is `!Send`, since most
/// scopes are per thread.
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
    guards: Vec<Box<dyn Guard + 'a>>,
    _not_send: PhantomData<*const ()>,
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
    /// ```
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
    /// ```
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
        self.guards.push(Box::new(guard));
        Ok(())
    }

    /// Runs `f` when the stack unwinds to this point (`ExitStack.callback`).
    ///
    /// ```
    /// use std::cell::Cell;
    /// let done = Cell::new(false);
    /// let mut stack = tch_scope::ScopeStack::new();
    /// stack.callback(|| done.set(true));
    /// drop(stack);
    /// assert!(done.get());
    /// ```
    pub fn callback(&mut self, f: impl FnOnce() + 'a) {
        struct OnDrop<F: FnOnce()>(Option<F>);
        impl<F: FnOnce()> Drop for OnDrop<F> {
            fn drop(&mut self) {
                if let Some(f) = self.0.take() {
                    f();
                }
            }
        }
        self.guards.push(Box::new(OnDrop(Some(f))));
    }

    /// Leaves the innermost scope now; `false` if the stack is empty.
    ///
    /// ```
    /// use tch_scope::{NoGrad, ScopeStack, is_grad_enabled};
    /// let mut stack = ScopeStack::new();
    /// stack.enter(NoGrad).unwrap();
    /// assert!(stack.pop());
    /// assert!(is_grad_enabled());
    /// assert!(!stack.pop());
    /// ```
    pub fn pop(&mut self) -> bool {
        self.guards.pop().is_some()
    }

    /// How many scopes are open.
    ///
    /// ```
    /// assert_eq!(tch_scope::ScopeStack::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.guards.len()
    }

    /// Whether no scope is open.
    ///
    /// ```
    /// assert!(tch_scope::ScopeStack::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }
}

impl Drop for ScopeStack<'_> {
    fn drop(&mut self) {
        // A Vec drops first-to-last; scopes must be left last-to-first.
        while self.guards.pop().is_some() {}
    }
}
