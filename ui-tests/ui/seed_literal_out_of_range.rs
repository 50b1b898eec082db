// An integer literal seed is a `u64` (an `i64` when negated): one beyond
// `torch.manual_seed`'s range is an error on the literal as written.
use tch_scope::scoped;

fn too_large() {
    scoped!(seed(18_446_744_073_709_551_616) => {});
}

fn too_negative() {
    scoped!(seed(-9_223_372_036_854_775_809) => {});
}

fn main() {
    too_large();
    too_negative();
}
