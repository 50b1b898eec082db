// One mistake per function, so none hides behind another.
use tch_scope::scoped;

fn case0() {
    scoped!(stream => {});
}

fn case1() {
    scoped!(timed("t", sync, events) => {});
}

fn case2() {
    let n = 3;
    scoped!(stream(n) => {});
}

fn main() {
    case0();
    case1();
    case2();
}
