// Every mistake in one list, each on its token.
use tch_scope::scoped;

fn main() {
    scoped!(sdpa(math, FLASH_ATTENTION, efficient = true, mem, math) => {});
}
