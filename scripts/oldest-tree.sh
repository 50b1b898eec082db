# Sourced by scripts/test-oldest.sh and scripts/gpu-bundle.sh: prepares the
# workspace at the oldest end of the supported range, tch 0.24 + libtorch
# 2.11.0, without touching the workspace's own Cargo.lock, .libtorch or
# target/.
#
#  1. bootstrap-libtorch.sh installs torch==2.11.0 once, into the same
#     cache as 2.13.0 (venv-torch-2.11.0).
#  2. The workspace's files (tracked and untracked-but-not-ignored, mtimes
#     kept so cargo rebuilds only what changed) are copied to
#     target/oldest/src, with .libtorch there linked to 2.11.0.
#  3. Its copy of Cargo.lock is pinned with `cargo update -p tch --precise`
#     (which brings torch-sys along); everything else stays as locked.
#  4. LIBTORCH, CARGO_TARGET_DIR=target/oldest/target and
#     TCH_SCOPE_GLOO_INCLUDE are exported, and the shell is left in the copy.
#
# Sets: oldest_torch, oldest_tch, oldest_lib (the torch/ folder),
# oldest_src (the copy), oldest_venv (the venv holding that torch).
# Needs: repo (the workspace root), cargo, say().

oldest_torch=${OLDEST_TORCH:-2.11.0}
oldest_tch=${OLDEST_TCH:-0.24.0}
oldest_root="$repo/target/oldest"
oldest_src="$oldest_root/src"

oldest_lib=$(env -u LIBTORCH bash "$repo/scripts/bootstrap-libtorch.sh" "$oldest_torch" "$oldest_root/libtorch" | tail -n1)
oldest_venv=$(cd "$oldest_lib/../../../.." && pwd)

say "copying the workspace to $oldest_src"
rm -rf "$oldest_src"
mkdir -p "$oldest_src"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
  | tar --null -T - -cf - | tar -C "$oldest_src" -xpf -)
ln -sfn "$oldest_lib" "$oldest_src/.libtorch"
if [ -e "$repo/.gloo" ]; then ln -sfn "$(readlink -f "$repo/.gloo")" "$oldest_src/.gloo"; fi
bash "$oldest_src/scripts/bootstrap-cuda-headers.sh"

say "pinning tch $oldest_tch in the copy's Cargo.lock"
(cd "$oldest_src" && "$cargo" update --quiet -p tch --precise "$oldest_tch")
grep -A1 '^name = "torch-sys"' "$oldest_src/Cargo.lock" | sed -n 's/^version = "\(.*\)"/torch-sys \1/p' >&2

export LIBTORCH="$oldest_src/.libtorch"
export CARGO_TARGET_DIR="$oldest_root/target"
if [ -e "$oldest_src/.gloo" ]; then export TCH_SCOPE_GLOO_INCLUDE="$oldest_src/.gloo"; fi
cd "$oldest_src"
say "libtorch $oldest_torch at $oldest_lib"
