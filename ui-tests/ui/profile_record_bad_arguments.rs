// One mistake per function, so none hides behind another.
use tch_scope::scoped;

fn case0() {
    scoped!(profile => {});
}

fn case1() {
    scoped!(record(42) => {});
}

fn main() {
    case0();
    case1();
}
