use tch_scope::scoped;

fn main() {
    scoped!(distributed(backend = mpi, from_env) => {});
}
