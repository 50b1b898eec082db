// One mistake per function, so none hides behind another.
use tch_scope::scoped;

fn case0() {
    scoped!(autocast(gpu, f16) => {});
}

fn case1() {
    scoped!(autocast(cpu, f32) => {});
}

fn case2() {
    scoped!(autocast(cuda, half) => {});
}

fn case3() {
    scoped!(autocast(cuda, f16, cache) => {});
}

fn main() {
    case0();
    case1();
    case2();
    case3();
}
