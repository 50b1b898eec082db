#!/usr/bin/env bash
# `make gpu-bundle`: the GPU test binaries, built here, for a GPU machine
# with PyTorch 2.11.0 but no network and no Rust (docs/gpu.md):
# target/gpu-bundle.tar.xz, at most 48 MiB, run there by scripts/gpu-run.sh.
#
#  1. scripts/oldest-tree.sh: torch==2.11.0 (the machine's version) from the
#     cache, the workspace copied to target/oldest/src with tch pinned to
#     0.24 (the tch of libtorch 2.11), shared with `make test-oldest`.
#  2. The test binaries holding CUDA paths, in release: gpu (tests/gpu.rs),
#     integration (device, timing's sync, distributed incl. NCCL, linkage),
#     memory (gpu_memory_scope), process_wide (seed on CUDA generators),
#     backends (matmul precision, cuDNN and SDPA flags, against PyTorch).
#     Later CUDA test binaries go into `bins` below.
#  3. Stripped, packed with what the tests read at run time (tests/data,
#     tests/dist_peer.py: found through TCH_SCOPE_TESTS_DIR, which
#     gpu-run.sh points at the unpacked tests/), and a BUNDLE file naming
#     torch, its CUDA flavour, tch, the commit and the date.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cargo=${CARGO:-cargo}
say() { printf 'gpu-bundle: %s\n' "$*" >&2; }
max_mib=48
bins=(gpu integration memory process_wide backends)
out="$repo/target/gpu-bundle.tar.xz"
stage="$repo/target/gpu-bundle"

bash "$repo/scripts/bootstrap-gloo.sh"
# shellcheck source=scripts/oldest-tree.sh
source "$repo/scripts/oldest-tree.sh"

[ -e "$oldest_lib/lib/libtorch_cuda.so" ] \
  || { say "error: torch $oldest_torch at $oldest_lib has no libtorch_cuda.so (a CPU wheel?)"; exit 1; }
cuda=$("$oldest_venv/bin/python" -c 'import torch; print(torch.version.cuda or "")' 2>/dev/null)
[ -n "$cuda" ] || { say "error: torch.version.cuda is empty for $oldest_venv"; exit 1; }
# The nccl backend compiles only with the CUDA headers bootstrap-cuda-headers.sh completes.
ls "$oldest_lib"/../nvidia/*/include/crt/host_config.h >/dev/null 2>&1 \
  || { say "error: no CUDA headers (nvidia/*/include/crt/host_config.h) beside $oldest_lib: the bundle would lack nccl"; exit 1; }

tests=()
for b in "${bins[@]}"; do tests+=(--test "$b"); done
say "building ${bins[*]} in release (tch $oldest_tch, libtorch $oldest_torch, CUDA $cuda)"
json=$("$cargo" test --release --no-run --locked -p tch-scope-tests "${tests[@]}" --message-format=json-render-diagnostics)

rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/tests"
for b in "${bins[@]}"; do
  exe=$(sed -n "s/.*\"target\":{[^}]*\"name\":\"$b\"[^}]*}.*\"executable\":\"\\([^\"]*\\)\".*/\\1/p" <<<"$json" | tail -n1)
  [ -x "$exe" ] || { say "error: no executable found for test binary $b"; exit 1; }
  strip -o "$stage/bin/$b" "$exe"
done
cp -r tests/data "$stage/tests/data"
cp tests/dist_peer.py "$stage/tests/"
cp scripts/gpu-figures.py "$stage/"
commit=$(git -C "$repo" rev-parse --short=12 HEAD)
git -C "$repo" diff --quiet HEAD 2>/dev/null || commit="$commit+dirty"
cat >"$stage/BUNDLE" <<INFO
torch=$oldest_torch
cuda=$cuda
tch=$oldest_tch
commit=$commit
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
bins=${bins[*]}
INFO

say "packing $out (xz -9)"
tar -C "$repo/target" -cf - gpu-bundle | xz -9 -T1 >"$out.tmp"
mv "$out.tmp" "$out"
size=$(stat -c %s "$out")
mib=$(( (size + (1 << 20) - 1) >> 20 ))
cat "$stage/BUNDLE" >&2
if [ "$size" -gt $(( max_mib << 20 )) ]; then
  say "error: $out is $size bytes (${mib} MiB), over the ${max_mib} MiB limit"
  exit 1
fi
say "ok: $out, $size bytes (about ${mib} MiB)"
