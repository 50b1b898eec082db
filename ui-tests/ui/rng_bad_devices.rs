// One mistake per function, so none hides behind another.
use tch_scope::scoped;

fn case0() {
    scoped!(fork_rng(devices = [0], devices = [1]) => {});
}

fn case1() {
    scoped!(fork_rng([0, 1]) => {});
}

fn case2() {
    scoped!(seed(devices = [0]) => {});
}

fn case3() {
    scoped!(seed(1, device = [0]) => {});
}

fn main() {
    case0();
    case1();
    case2();
    case3();
}
