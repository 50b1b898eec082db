//! Every exit path restores the state exactly: end of block, `return`, `?`,
//! `break`, `continue`, panic — nested in any order.

use std::panic::{AssertUnwindSafe, catch_unwind};

use tch_scope::scoped;

use crate::util::{ThreadState, fresh, state};

fn early_return(stop: bool) -> i32 {
    scoped!(no_grad, inference_mode, device(cpu) => {
        if stop {
            return 1;
        }
        2
    })
}

#[test]
fn return_restores() {
    assert_eq!(early_return(true), 1);
    assert_eq!(state(), fresh());
    assert_eq!(early_return(false), 2);
    assert_eq!(state(), fresh());
}

fn question_mark(input: &str) -> Result<i32, std::num::ParseIntError> {
    let n = scoped!(inference_mode => {
        let n: i32 = input.parse()?;
        n * 2
    });
    Ok(n)
}

#[test]
fn question_mark_acts_on_the_function_and_restores() {
    assert_eq!(question_mark("21"), Ok(42));
    assert!(question_mark("x").is_err());
    assert_eq!(state(), fresh());
}

#[test]
fn break_and_continue_act_on_the_enclosing_loop() {
    let mut seen = vec![];
    'outer: for i in 0..10 {
        for j in 0..3 {
            scoped!(no_grad => {
                if i == 1 {
                    continue 'outer;
                }
                if j == 1 {
                    continue;
                }
                if i == 4 {
                    break 'outer;
                }
                seen.push((i, j, tch_scope::is_grad_enabled()));
            });
            assert!(tch_scope::is_grad_enabled());
        }
    }
    assert_eq!(
        seen,
        [
            (0, 0, false),
            (0, 2, false),
            (2, 0, false),
            (2, 2, false),
            (3, 0, false),
            (3, 2, false)
        ]
    );
    #[allow(clippy::never_loop, reason = "the break is the point")]
    let v = loop {
        scoped!(inference_mode => break 7);
    };
    assert_eq!(v, 7);
    assert_eq!(state(), fresh());
}

#[test]
fn panic_restores() {
    let r = catch_unwind(|| {
        scoped!(inference_mode, device(cpu), enable_grad => {
            assert!(tch_scope::is_grad_enabled());
            panic!("boom");
        })
    });
    assert!(r.is_err());
    assert_eq!(state(), fresh());
}

/// A function nesting three scopes in the given order, left by `exit`:
/// 0 end of block, 1 `return`, 2 `?`, 3 panic — each crossing all three.
macro_rules! nested {
    ($name:ident: $a:ident, $b:ident, $c:ident) => {
        fn $name(exit: u8) -> Option<ThreadState> {
            scoped!($a => {
                scoped!($b => {
                    scoped!($c => {
                        let s = state();
                        match exit {
                            1 => return Some(s),
                            2 => None::<u8>?,
                            3 => panic!("exit by panic"),
                            _ => 0,
                        };
                        Some(s)
                    })
                })
            })
        }
    };
}
nested!(ngi: no_grad, enable_grad, inference_mode);
nested!(nig: no_grad, inference_mode, enable_grad);
nested!(gni: enable_grad, no_grad, inference_mode);
nested!(gin: enable_grad, inference_mode, no_grad);
nested!(ing: inference_mode, no_grad, enable_grad);
nested!(ign: inference_mode, enable_grad, no_grad);

#[test]
fn nested_in_every_order_with_every_exit() {
    // (function, grad mode expected innermost: the innermost word wins).
    type Case = (fn(u8) -> Option<ThreadState>, bool);
    let cases: [Case; 6] = [
        (ngi, false),
        (nig, true),
        (gni, false),
        (gin, false),
        (ing, true),
        (ign, false),
    ];
    for (i, (f, grad)) in cases.into_iter().enumerate() {
        for exit in 0..4 {
            let r = catch_unwind(AssertUnwindSafe(|| f(exit)));
            assert_eq!(r.is_err(), exit == 3, "case {i} exit {exit}");
            match r {
                Ok(Some(inside)) => {
                    assert!(exit < 2, "case {i} exit {exit}");
                    assert_eq!(inside.grad, grad, "case {i}");
                    assert!(inside.inference, "case {i}");
                }
                Ok(None) => assert_eq!(exit, 2),
                Err(_) => {}
            }
            assert_eq!(state(), fresh(), "case {i} exit {exit}");
        }
    }
}

/// A body that starts with a block but goes on (`{ a } + { b }`) is one
/// expression, not a block statement followed by something else.
#[test]
fn block_led_expression_bodies_stay_one_expression() {
    let double = |x: i32| x * 2;
    let sum = scoped!(no_grad => { 1 } + { 2 });
    let called = scoped!(no_grad => { double }(4));
    let minus = scoped!(no_grad => { 5 } - 1);
    let matched = scoped!(no_grad => match sum { 3 => "three", _ => "?" }.len());
    assert_eq!((sum, called, minus, matched), (3, 8, 4, 5));
    assert_eq!(tch_scope::try_scoped!(no_grad => { 1 } == { 1 }), Ok(true));
    assert_eq!(state(), fresh());
}
