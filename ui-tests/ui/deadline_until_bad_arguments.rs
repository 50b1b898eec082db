// `deadline(until = t)` takes a `std::time::Instant`: one mistake per
// function, so none hides behind another.
use std::time::{Duration, Instant};

use tch_scope::{deadline, scoped};

fn case0() {
    scoped!(deadline(until = 100) => {});
}

fn case1(t: Instant) {
    scoped!(deadline(Duration::from_millis(100), until = t) => {});
}

fn case2() {
    scoped!(deadline(until = Duration::from_millis(100)) => {});
}

fn case3(t: Instant) {
    scoped!(deadline(untill = t) => {});
}

#[deadline(until = 2.5)]
fn case4() {}

fn main() {
    case0();
    case1(Instant::now());
    case2();
    case3(Instant::now());
    case4();
}
