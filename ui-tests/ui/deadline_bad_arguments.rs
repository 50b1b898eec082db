// One mistake per function, so none hides behind another.
use tch_scope::{deadline, scoped};

fn case0() {
    scoped!(deadline => {});
}

fn case1() {
    scoped!(deadline(100) => {});
}

fn case2() {
    scoped!(deadline(2.5) => {});
}

fn case3() {
    scoped!(deadline(std::time::Duration::ZERO, std::time::Duration::MAX) => {});
}

fn case4(ms: u64) {
    scoped!(deadline(ms) => {});
}

#[deadline(30)]
fn case5() {}

fn main() {
    case0();
    case1();
    case2();
    case3();
    case4(1);
    case5();
}
