// One mistake per function, so none hides behind another.
use tch_scope::scoped;

fn case0() {
    scoped!(detect_anomaly(check_nans = false) => {});
}

fn case1() {
    scoped!(deterministic(true) => {});
}

fn case2() {
    scoped!(deterministic(warn_only = 1) => {});
}

fn main() {
    case0();
    case1();
    case2();
}
