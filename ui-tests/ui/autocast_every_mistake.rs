// Every mistake in one list, each on its token.
use tch_scope::scoped;

fn main() {
    scoped!(autocast(gpu, half, cache_enabled = false, enabled = true, enabled = false, cache) => {});
}
