//! Exits that see the outcome (`__exit__(exc_type, exc, tb)`): a user's
//! `Scope::exit` and `ScopeStack::push_exit` hear how the body ended, on
//! every exit path, as `tch_scope::Outcome` documents.

use std::cell::RefCell;
use std::convert::Infallible;
use std::panic::{AssertUnwindSafe, catch_unwind};

use tch_scope::{NoGrad, Outcome, Scope, ScopeError, ScopeStack, scoped, try_scoped, with};

use crate::util::{fresh, state};

thread_local!(static HEARD: RefCell<Vec<(&'static str, Outcome)>> = const { RefCell::new(Vec::new()) });

/// A user scope that records what its exit heard, under its name.
struct Probe(&'static str);
struct ProbeGuard(&'static str);

impl Scope for Probe {
    type Guard = ProbeGuard;
    type Error = Infallible;
    fn enter(&mut self) -> Result<ProbeGuard, Infallible> {
        Ok(ProbeGuard(self.0))
    }
    fn exit(guard: &mut ProbeGuard, outcome: Outcome) {
        HEARD.with(|h| h.borrow_mut().push((guard.0, outcome)));
    }
}

/// What the probes heard since the last call, in order.
fn heard() -> Vec<(&'static str, Outcome)> {
    HEARD.with(|h| std::mem::take(&mut *h.borrow_mut()))
}

fn one(outcome: Outcome) -> Vec<(&'static str, Outcome)> {
    vec![("p", outcome)]
}

#[test]
fn a_block_completes_whatever_its_value() {
    heard();
    assert_eq!(scoped!(with(Probe("p")) => 1 + 1), 2);
    assert_eq!(heard(), one(Outcome::Completed));
    // A block's value is not looked at (its type may come from the context).
    let r: Result<u8, String> = scoped!(with(Probe("p")) => Err("no".into()));
    assert!(r.is_err());
    assert_eq!(heard(), one(Outcome::Completed));
    let r: Result<Vec<u8>, ScopeError> = try_scoped!(with(Probe("p")) => (1..3).collect());
    assert_eq!(r, Ok(vec![1, 2]));
    assert_eq!(heard(), one(Outcome::Completed));
}

fn leave_by_return(stop: bool) -> u8 {
    scoped!(with(Probe("p")) => {
        if stop {
            return 1;
        }
        2
    })
}

fn leave_by_question_mark(s: &str) -> Result<u8, std::num::ParseIntError> {
    Ok(scoped!(with(Probe("p")) => s.parse::<u8>()? + 1))
}

/// As Python's `__exit__` hears `None` after a `return` out of a `with`.
#[test]
fn return_question_mark_and_break_out_of_a_block_complete() {
    heard();
    assert_eq!(leave_by_return(true), 1);
    assert_eq!(heard(), one(Outcome::Completed));
    assert_eq!(leave_by_return(false), 2);
    assert_eq!(heard(), one(Outcome::Completed));
    assert!(leave_by_question_mark("x").is_err());
    assert_eq!(heard(), one(Outcome::Completed));
    assert_eq!(leave_by_question_mark("1"), Ok(2));
    assert_eq!(heard(), one(Outcome::Completed));
    for i in 0..3 {
        scoped!(with(Probe("p")) => {
            if i == 0 {
                continue;
            }
            if i == 1 {
                break;
            }
        });
    }
    assert_eq!(heard(), vec![("p", Outcome::Completed); 2]);
}

#[test]
fn a_panic_is_heard_by_every_scope_innermost_first() {
    heard();
    let r = catch_unwind(AssertUnwindSafe(
        || scoped!(with(Probe("outer")), no_grad, with(Probe("inner")) => panic!("boom")),
    ));
    assert!(r.is_err());
    assert_eq!(
        heard(),
        vec![("inner", Outcome::Panicked), ("outer", Outcome::Panicked)]
    );
    assert_eq!(state(), fresh());
}

#[test]
fn a_scope_that_cannot_be_entered_fails_the_ones_before_it() {
    if tch_scope::cuda_device_count() > 7 {
        return;
    }
    heard();
    let r = try_scoped!(with(Probe("p")), device(7) => ());
    assert!(r.is_err());
    assert_eq!(heard(), one(Outcome::Failed));
    let r = catch_unwind(|| scoped!(with(Probe("p")), device(7) => ()));
    assert!(r.is_err());
    assert_eq!(heard(), one(Outcome::Panicked));
    assert!(failing_entry().is_err());
    assert_eq!(heard(), one(Outcome::Failed));
}

#[tch_scope::scope(with(Probe("p")), device(7))]
fn failing_entry() -> Result<(), ScopeError> {
    Ok(())
}

#[with(Probe("p"))]
fn parse(s: &str, early: bool) -> Result<u8, std::num::ParseIntError> {
    if early {
        return Ok(0);
    }
    let n: u8 = s.parse()?;
    Ok(n)
}

#[with(Probe("p"))]
fn no_result(early: bool) -> u8 {
    if early {
        return 1;
    }
    2
}

#[with(Probe("p"))]
fn panics() -> Result<u8, String> {
    panic!("boom")
}

#[test]
fn attributed_functions_see_their_result() {
    heard();
    assert_eq!(parse("5", false), Ok(5));
    assert_eq!(heard(), one(Outcome::Completed));
    assert!(parse("x", false).is_err()); // `?`
    assert_eq!(heard(), one(Outcome::Failed));
    assert_eq!(parse("x", true), Ok(0)); // `return Ok(..)`
    assert_eq!(heard(), one(Outcome::Completed));
    // A return out of a function is its end, not an early exit.
    assert_eq!(no_result(true), 1);
    assert_eq!(heard(), one(Outcome::Completed));
    assert!(catch_unwind(panics).is_err());
    assert_eq!(heard(), one(Outcome::Panicked));
}

#[tch_scope::scope(with(Probe("if")) if on, with(tch_scope::Chain(Probe("a"), tch_scope::Chain(Probe("b"), tch_scope::End))) if on)]
fn chained(on: bool, s: &str) -> Result<u8, std::num::ParseIntError> {
    s.parse()
}

#[test]
fn a_condition_and_a_chain_pass_the_outcome_on() {
    heard();
    for on in [true, false] {
        assert!(chained(on, "x").is_err());
    }
    assert_eq!(
        heard(),
        vec![
            ("b", Outcome::Failed),
            ("a", Outcome::Failed),
            ("if", Outcome::Failed)
        ]
    );
}

#[test]
fn a_stack_tells_its_scopes_and_callbacks_innermost_first() {
    heard();
    let mut stack = ScopeStack::new();
    stack.enter(Probe("scope")).unwrap();
    stack.push_exit(|o| HEARD.with(|h| h.borrow_mut().push(("callback", o))));
    stack.enter(NoGrad).unwrap();
    drop(stack);
    assert_eq!(
        heard(),
        vec![
            ("callback", Outcome::Completed),
            ("scope", Outcome::Completed)
        ]
    );
    assert_eq!(state(), fresh());

    let mut stack = ScopeStack::new();
    stack.enter(Probe("scope")).unwrap();
    let result: Result<(), &str> = Err("bad batch");
    stack.close(Outcome::of(&result));
    assert_eq!(heard(), vec![("scope", Outcome::Failed)]);

    let mut stack = ScopeStack::new();
    stack.enter(Probe("popped")).unwrap();
    assert!(stack.pop());
    assert_eq!(heard(), vec![("popped", Outcome::Completed)]);

    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut stack = ScopeStack::new();
        stack.enter(Probe("scope")).unwrap();
        stack.enter(NoGrad).unwrap();
        panic!("boom");
    }));
    assert!(r.is_err());
    assert_eq!(heard(), vec![("scope", Outcome::Panicked)]);
    assert_eq!(state(), fresh());
}

#[test]
fn pop_all_moves_the_open_scopes_out() {
    heard();
    let mut setup = ScopeStack::new();
    setup.enter(NoGrad).unwrap();
    setup.enter(Probe("moved")).unwrap();
    let kept = setup.pop_all();
    assert!(setup.is_empty());
    assert_eq!(kept.len(), 2);
    drop(setup);
    assert!(heard().is_empty());
    assert!(!tch_scope::is_grad_enabled());
    kept.close(Outcome::Failed);
    assert_eq!(heard(), vec![("moved", Outcome::Failed)]);
    assert_eq!(state(), fresh());
}
