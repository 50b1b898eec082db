use tch_scope::scoped;

fn main() {
    scoped!(distributed(from_env, timeout = 30) => {});
}
