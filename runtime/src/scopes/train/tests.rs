//! Mode scopes on the lane and in the record: the modes come back after
//! the last scope, whichever guard kept them and in whatever order the
//! scopes end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use tch::TchError;

use crate::{Mode, Scope, Trainable};

/// A model that threads can share: its one flag.
struct Net(AtomicBool);

impl Net {
    fn is_training(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl Trainable for Net {
    type Modes = bool;
    fn modes(&self) -> Result<bool, TchError> {
        Ok(self.is_training())
    }
    fn set_training(&self, on: bool) -> Result<(), TchError> {
        self.0.store(on, Ordering::SeqCst);
        Ok(())
    }
    fn restore_modes(&self, modes: bool) -> Result<(), TchError> {
        self.set_training(modes)
    }
}

fn model() -> Net {
    Net(AtomicBool::new(true))
}

#[test]
fn nested_scopes_on_one_thread_end_in_either_order() {
    let m = model();
    for outer_first in [true, false] {
        assert!(m.is_training());
        let outer = Mode::eval(&m).enter().unwrap();
        let inner = Mode::eval(&m).enter().unwrap();
        assert!(!m.is_training());
        if outer_first {
            // The outer guard kept the modes: they stay for the inner one.
            drop(outer);
            assert!(!m.is_training());
            drop(inner);
        } else {
            drop(inner);
            assert!(!m.is_training());
            drop(outer);
        }
        assert!(m.is_training(), "restored after the last");
    }
    // Another mode nested: the record, then the lane again.
    let outer = Mode::eval(&m).enter().unwrap();
    let inner = Mode::train(&m).enter().unwrap();
    assert!(m.is_training());
    drop(outer);
    assert!(m.is_training(), "the newest holds");
    drop(inner);
    assert!(m.is_training());
    m.set_training(false).unwrap();
    drop(Mode::train(&m).enter().unwrap());
    assert!(
        !m.is_training(),
        "eval before the first, eval after the last"
    );
}

#[test]
fn another_thread_joins_or_is_refused_and_the_last_restores() {
    let m = Arc::new(model());
    let (held, done) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let owner = {
        let (m, held, done) = (m.clone(), held.clone(), done.clone());
        std::thread::Builder::new()
            .name("mode-owner".into())
            .spawn(move || {
                let g = Mode::eval(&*m).enter().unwrap();
                held.wait();
                done.wait();
                drop(g);
            })
            .unwrap()
    };
    held.wait();
    let e = Mode::train(&*m).enter().unwrap_err();
    assert_eq!(
        e.reason(),
        "train(model) conflicts with eval(model) held by thread mode-owner"
    );
    let shared = Mode::eval(&*m).enter().unwrap();
    done.wait();
    owner.join().unwrap();
    // The owner's guard kept the modes and left first: they wait for this
    // one, the last.
    assert!(!m.is_training());
    drop(shared);
    assert!(m.is_training());
}
