use tch_scope::scoped;

struct Timer;

fn main() {
    scoped!(with(Timer) => {});
}
