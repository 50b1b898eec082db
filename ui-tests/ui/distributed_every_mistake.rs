// Every mistake in one list, each on its token: those of each argument,
// then those of the arguments together.
#[tch_scope::distributed(from_env, backend = mpi, rank = 1, master = "localhost", from_env = true)]
fn worker() {}

fn main() {
    worker();
}
