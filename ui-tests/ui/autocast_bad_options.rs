// One mistake per function, so none hides behind another.
use tch_scope::scoped;

fn case0() {
    scoped!(autocast(cpu, bf16, cache_enabled = false) => {});
}

fn case1() {
    scoped!(autocast(cuda, enabled = true, enabled = false) => {});
}

fn case2() {
    scoped!(autocast(cpu, dtype = Kind::BFloat16) => {});
}

fn case3() {
    scoped!(autocast(cpu, cache = 0) => {});
}

fn main() {
    case0();
    case1();
    case2();
    case3();
}
