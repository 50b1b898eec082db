// One mistake per function, so none hides behind another.
use tch_scope::scoped;

fn case0() {
    scoped!(seed => {});
}

fn case1() {
    scoped!(seed("42") => {});
}

fn case2() {
    scoped!(fork_rng(1) => {});
}

fn main() {
    case0();
    case1();
    case2();
}
