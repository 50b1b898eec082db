#!/usr/bin/env bash
# `make test-oldest`: the test suite at the oldest end of the supported
# range, tch 0.24 + libtorch 2.11.0, without touching the workspace's own
# Cargo.lock, .libtorch or target/.
#
#  1-3. scripts/oldest-tree.sh (shared with `make gpu-bundle`): torch==2.11.0
#     from the cache, a copy of the workspace under target/oldest/src with
#     .libtorch linked to it and its Cargo.lock pinned to tch 0.24.
#  4. The suite runs there with CARGO_TARGET_DIR=target/oldest/target:
#     every package but ui-tests, whose compile-fail diagnostics come from
#     the macros and do not depend on the tch version, and whose trybuild
#     project builds tch-scope a second time (13 of the 32 minutes of a cold
#     run on 2 busy cores). OLDEST_UI=1 runs them too.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cargo=${CARGO:-cargo}
say() { printf 'test-oldest: %s\n' "$*" >&2; }

# shellcheck source=scripts/oldest-tree.sh
source "$repo/scripts/oldest-tree.sh"
exclude=(--exclude ui-tests)
[ "${OLDEST_UI:-0}" = 1 ] && exclude=()
# tests/serve.rs runs the examples from target/.../examples/, where only
# `cargo build` puts them (same features as the tests: nothing is rebuilt).
"$cargo" build --workspace "${exclude[@]}" --examples
"$cargo" test --workspace "${exclude[@]}" --all-targets
"$cargo" test --workspace "${exclude[@]}" --doc
bash scripts/check-linkage.sh
say "ok: tch $oldest_tch, libtorch $oldest_torch"
