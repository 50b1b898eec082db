//! The lane and the lock together, on a setting whose state is a plain
//! atomic: the lock-free road for one thread, the record for everything
//! else, and the rules of the module docs across both.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard};

use super::{Registry, Setting, Ticket};
use crate::lease::{Lane, me};
use crate::sync::lock;

struct Fake;

static STATE: AtomicU8 = AtomicU8::new(0);
static REGISTRY: Registry<Fake> = Registry::new();

impl Setting for Fake {
    type Value = u8;
    type Saved = u8;

    fn registry() -> &'static Registry<Self> {
        &REGISTRY
    }

    fn same(a: &u8, b: &u8) -> bool {
        a == b
    }

    fn describe(v: &u8) -> String {
        format!("fake({v})")
    }

    fn save() -> Result<u8, String> {
        Ok(STATE.load(Ordering::SeqCst))
    }

    fn set(v: &u8) -> Result<(), String> {
        STATE.store(*v, Ordering::SeqCst);
        Ok(())
    }

    fn restore(saved: &u8) -> Result<(), String> {
        Self::set(saved)
    }

    fn code(v: &u8) -> Option<u8> {
        Some(*v)
    }
}

/// One test at a time: they share the setting.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    lock(&LOCK)
}

fn state() -> u8 {
    STATE.load(Ordering::SeqCst)
}

fn enter(v: u8) -> Ticket {
    REGISTRY.enter(v).unwrap()
}

fn leave(t: &Ticket) {
    REGISTRY.leave(t).unwrap();
}

fn on_lane() -> bool {
    REGISTRY.lane.biased_to(me())
}

#[test]
fn one_thread_stays_on_the_lane_nested_and_out_of_order() {
    let _s = serial();
    STATE.store(9, Ordering::SeqCst);
    for _ in 0..3 {
        let a = enter(1);
        assert_eq!(state(), 1);
        assert_eq!(on_lane(), Lane::<u8, u8>::can_bias());
        let b = enter(1);
        leave(&a);
        assert_eq!(state(), 1, "the inner one still holds it");
        leave(&b);
        assert_eq!(state(), 9, "put back after the last");
    }
    assert_eq!(
        on_lane(),
        Lane::<u8, u8>::can_bias(),
        "the bias outlives the scopes"
    );
}

#[test]
fn a_nested_other_value_moves_the_lane_into_the_record() {
    let _s = serial();
    STATE.store(0, Ordering::SeqCst);
    // The inner one leaves first, then in the other order.
    for inner_first in [true, false] {
        let a = enter(1);
        let b = enter(2);
        assert_eq!(state(), 2);
        assert!(!on_lane(), "two values: on the lock");
        if inner_first {
            leave(&b);
            assert_eq!(state(), 1, "the outer value again");
            leave(&a);
        } else {
            leave(&a);
            assert_eq!(state(), 2, "the newest still holds");
            leave(&b);
        }
        assert_eq!(state(), 0);
    }
    // The record is empty again: the lane is taken again.
    let a = enter(3);
    assert_eq!(on_lane(), Lane::<u8, u8>::can_bias());
    leave(&a);
}

#[test]
fn another_thread_takes_the_lane_away_and_is_refused_by_its_holder() {
    let _s = serial();
    STATE.store(0, Ordering::SeqCst);
    let (held, done) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let owner = {
        let (held, done) = (held.clone(), done.clone());
        std::thread::Builder::new()
            .name("lane-owner".into())
            .spawn(move || {
                let t = enter(5);
                let biased = on_lane();
                held.wait();
                done.wait();
                leave(&t);
                biased
            })
            .unwrap()
    };
    held.wait();
    let e = REGISTRY.enter(6).unwrap_err();
    assert_eq!(
        e.reason(),
        "fake(6) conflicts with fake(5) held by thread lane-owner"
    );
    let shared = enter(5);
    assert_eq!(state(), 5);
    done.wait();
    let biased = owner.join().unwrap();
    assert_eq!(biased, Lane::<u8, u8>::can_bias());
    assert_eq!(state(), 5, "the owner left first: still shared");
    leave(&shared);
    assert_eq!(state(), 0);
}

#[test]
fn a_slot_suspended_on_one_thread_resumes_and_leaves_on_another() {
    let _s = serial();
    STATE.store(0, Ordering::SeqCst);
    let t = enter(7);
    REGISTRY.suspend(&t);
    assert!(!on_lane(), "suspending takes the lock's road");
    let t = std::thread::spawn(move || {
        REGISTRY.resume(&t);
        assert_eq!(state(), 7);
        // Nested here: the task's holder.
        let inner = enter(8);
        assert_eq!(state(), 8);
        leave(&inner);
        t
    })
    .join()
    .unwrap();
    // Still active on the other thread, which ended: this thread is
    // another holder.
    let e = REGISTRY.enter(9).unwrap_err();
    assert!(
        e.reason().starts_with("fake(9) conflicts with fake(7)"),
        "{e}"
    );
    leave(&t);
    assert_eq!(state(), 0);
}

/// Threads entering and leaving at random, values 1 and 2, nested and out
/// of order: whatever a thread holds, the state is its newest value, and
/// the original after all.
#[test]
fn threads_at_random_always_see_their_newest_value() {
    let _s = serial();
    STATE.store(0, Ordering::SeqCst);
    let taken = REGISTRY.lane.taken();
    let threads: Vec<_> = (0..4u64)
        .map(|seed| {
            std::thread::spawn(move || {
                let mut x = seed * 2_654_435_761 + 1;
                let mut rand = move || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                let mut held: Vec<(Ticket, u8)> = Vec::new();
                let mut refused = 0u32;
                for _ in 0..200_000 {
                    let r = rand();
                    if held.len() < 5 && (held.is_empty() || r % 3 != 0) {
                        let v = 1 + (r >> 8) as u8 % 2;
                        match REGISTRY.enter(v) {
                            Ok(t) => held.push((t, v)),
                            Err(_) => refused += 1,
                        }
                    } else {
                        let i = (r >> 16) as usize % held.len();
                        let (t, _) = held.remove(i);
                        leave(&t);
                    }
                    if r % 97 == 0
                        && let Some((t, _)) = held.last()
                    {
                        REGISTRY.suspend(t);
                        REGISTRY.resume(t);
                    }
                    if let Some(&(_, v)) = held.last() {
                        assert_eq!(state(), v, "a holder sees its newest value");
                    }
                }
                for (t, _) in held.drain(..).rev() {
                    leave(&t);
                }
                refused
            })
        })
        .collect();
    let refused: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(state(), 0, "the original after all");
    assert!(refused > 0, "the threads met");
    // How often depends on how the threads were scheduled.
    eprintln!(
        "the lane changed hands {} times",
        REGISTRY.lane.taken() - taken
    );
}

/// One thread in a loop on the lane, another coming in now and then with
/// the same value: each time it takes the lane away, perhaps in the middle
/// of the owner's step; neither ever sees another value, and the original
/// comes back.
#[test]
fn taking_the_lane_mid_step_loses_nothing() {
    let _s = serial();
    STATE.store(0, Ordering::SeqCst);
    let taken = REGISTRY.lane.taken();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Arc::new(Barrier::new(2));
    let owner = {
        let (stop, started) = (stop.clone(), started.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if n == 1 {
                    started.wait();
                }
                let a = enter(1);
                assert_eq!(state(), 1);
                let b = enter(1);
                leave(&a);
                assert_eq!(state(), 1);
                leave(&b);
                n += 1;
            }
            n
        })
    };
    started.wait();
    for _ in 0..2_000 {
        let t = enter(1);
        assert_eq!(state(), 1);
        leave(&t);
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    assert!(owner.join().unwrap() > 0);
    assert_eq!(state(), 0);
    if Lane::<u8, u8>::can_bias() {
        let n = REGISTRY.lane.taken() - taken;
        assert!(n > 0, "the lane never changed hands");
        eprintln!("the lane changed hands {n} times");
    }
}
