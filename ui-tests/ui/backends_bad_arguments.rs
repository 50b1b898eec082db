// One mistake per function, so none hides behind another.
use tch_scope::{cudnn, matmul_precision, scoped, sdpa};

#[matmul_precision("High")]
fn case0() {}

fn case1() {
    scoped!(matmul_precision("fast") => {});
}

fn case2() {
    scoped!(matmul_precision => {});
}

fn case3() {
    scoped!(tf32 => {});
}

#[cudnn]
fn case4() {}

fn case5() {
    scoped!(cudnn(benchmark = true, fast = true) => {});
}

#[sdpa()]
fn case6() {}

fn case7() {
    scoped!(sdpa(math, flash, math) => {});
}

fn case8() {
    scoped!(sdpa(flash_attention, efficient = true) => {});
}

fn case9() {
    scoped!(matmul_precision("high"), tf32(false) => {});
}

fn case10() {
    scoped!(cudnn(benchmark = 1) => {});
}

fn main() {
    case0();
    case1();
    case2();
    case3();
    case4();
    case5();
    case6();
    case7();
    case8();
    case9();
    case10();
}
