// Each word reports every mistake in its arguments at once, each on its
// token, its own checks included; a positional param may also be written
// by name (`threads(n = 1)` compiles). One word per function, so none
// hides behind another.
use tch_scope::scoped;

fn case0() {
    scoped!(threads(n = 1) => {});
}

fn case1() {
    scoped!(device(-1, 2) => {});
}

fn case2() {
    scoped!(timed(name = label, sync, events) => {});
}

fn case3() {
    scoped!(deadline(100, until = 5) => {});
}

fn main() {
    case0();
    case1();
    case2();
    case3();
}
