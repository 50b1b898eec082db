#!/usr/bin/env bash
# `make test-oldest`: the test suite at the oldest end of the supported
# range, tch 0.24 + libtorch 2.11.0, without touching the workspace's own
# Cargo.lock, .libtorch or target/.
#
#  1. bootstrap-libtorch.sh installs torch==2.11.0 once, into the same
#     cache as 2.13.0 (venv-torch-2.11.0).
#  2. The workspace's files (tracked and untracked-but-not-ignored, mtimes
#     kept so cargo rebuilds only what changed) are copied to
#     target/oldest/src, with .libtorch there linked to 2.11.0.
#  3. Its copy of Cargo.lock is pinned with `cargo update -p tch --precise`
#     (which brings torch-sys along); everything else stays as locked.
#  4. The suite runs there with CARGO_TARGET_DIR=target/oldest/target:
#     every package but ui-tests, whose compile-fail diagnostics come from
#     the macros and do not depend on the tch version, and whose trybuild
#     project builds tch-scope a second time (13 of the 32 minutes of a cold
#     run on 2 busy cores). OLDEST_UI=1 runs them too.
set -euo pipefail

torch=${OLDEST_TORCH:-2.11.0}
tch=${OLDEST_TCH:-0.24.0}
repo=$(cd "$(dirname "$0")/.." && pwd)
root="$repo/target/oldest"
src="$root/src"
cargo=${CARGO:-cargo}
say() { printf 'test-oldest: %s\n' "$*" >&2; }

lib=$(env -u LIBTORCH bash "$repo/scripts/bootstrap-libtorch.sh" "$torch" "$root/libtorch" | tail -n1)

say "copying the workspace to $src"
rm -rf "$src"
mkdir -p "$src"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
  | tar --null -T - -cf - | tar -C "$src" -xpf -)
ln -sfn "$lib" "$src/.libtorch"
if [ -e "$repo/.gloo" ]; then ln -sfn "$(readlink -f "$repo/.gloo")" "$src/.gloo"; fi
bash "$src/scripts/bootstrap-cuda-headers.sh"

say "pinning tch $tch in the copy's Cargo.lock"
(cd "$src" && "$cargo" update --quiet -p tch --precise "$tch")
grep -A1 '^name = "torch-sys"' "$src/Cargo.lock" | sed -n 's/^version = "\(.*\)"/torch-sys \1/p' >&2

export LIBTORCH="$src/.libtorch"
export CARGO_TARGET_DIR="$root/target"
[ -e "$src/.gloo" ] && export TCH_SCOPE_GLOO_INCLUDE="$src/.gloo"
cd "$src"
say "libtorch $torch at $lib"
exclude=(--exclude ui-tests)
[ "${OLDEST_UI:-0}" = 1 ] && exclude=()
"$cargo" test --workspace "${exclude[@]}" --all-targets
"$cargo" test --workspace "${exclude[@]}" --doc
bash scripts/check-linkage.sh
say "ok: tch $tch, libtorch $torch"
