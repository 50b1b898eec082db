#!/usr/bin/env bash
# Usage: GPU_OUT=DIR bash scripts/gpu-run.sh BUNDLE
#
# Runs the GPU bundle (`make gpu-bundle`: target/gpu-bundle.tar.xz) on a
# machine with a GPU and PyTorch but no Rust and no network (docs/gpu.md;
# `make gpu-bundle-smoke` runs it here on the CPU):
#  - unpacks BUNDLE into a temporary folder;
#  - finds this machine's torch through `python3` (PYTHON overrides) and
#    refuses, in one line, if its version is not the bundle's;
#  - LD_LIBRARY_PATH = torch/lib and every nvidia/*/lib beside it (the
#    binaries' rpath names the build machine's cache);
#  - every test of every binary (ignored ones too), each in a process of
#    its own under `timeout`: tests/gpu.rs one at a time first (its figures
#    want a quiet GPU), then the others GPU_JOBS at a time;
#  - scripts/gpu-figures.py: the same work measured by PyTorch.
# Writes DIR/gpu-summary.txt (default target/gpu-out; also printed): each
# test passed / failed / skipped (a `GPU-SKIP <test>: <reason>` line in its
# output), and every `GPU-FIGURE` line; DIR/gpu-logs.txt holds every test's
# output. Exits 1 if a test failed, 2 if it refused to run.
set -uo pipefail

say() { printf 'gpu-run: %s\n' "$*" >&2; }
refuse() { echo "gpu-run: refused: $*"; exit 2; }

[ $# -eq 1 ] && [ -f "$1" ] || refuse "usage: GPU_OUT=DIR bash scripts/gpu-run.sh BUNDLE.tar.xz (got: ${1:-nothing})"
bundle_file=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
out=${GPU_OUT:-target/gpu-out}
mkdir -p "$out" && out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
start=$(date +%s)

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-run.XXXXXX")
trap 'rm -rf "$work"' EXIT
if command -v xz >/dev/null; then
  tar -xJf "$bundle_file" -C "$work" || refuse "cannot unpack $bundle_file"
else # no xz-utils: Python's lzma
  "$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle_file" "$work" \
    || refuse "cannot unpack $bundle_file (no xz, and $py could not either)"
fi
b="$work/gpu-bundle"
[ -f "$b/BUNDLE" ] || refuse "$bundle_file has no gpu-bundle/BUNDLE (not made by make gpu-bundle?)"
field() { sed -n "s/^$1=//p" "$b/BUNDLE"; }
want=$(field torch)
want_cuda=$(field cuda)

info=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__); print(torch.version.cuda or "none"); print(torch.cuda.is_available())' 2>/dev/null) \
  || refuse "'$py' cannot import torch; the bundle needs torch $want (cuda $want_cuda) under python3 (or PYTHON=...)"
torch_dir=$(sed -n 1p <<<"$info")
have_full=$(sed -n 2p <<<"$info")
have_cuda=$(sed -n 3p <<<"$info")
cuda_seen=$(sed -n 4p <<<"$info")
have=${have_full%%+*}
[ "$have" = "$want" ] \
  || refuse "this machine's torch is $have_full ($torch_dir), the bundle was built for torch $want (cuda $want_cuda); build one for it with OLDEST_TORCH=$have OLDEST_TCH=<its tch> make gpu-bundle"
[ "$have_cuda" = "$want_cuda" ] || say "warning: torch here is built for CUDA $have_cuda, the bundle for $want_cuda"

lib="$torch_dir/lib"
for d in "$torch_dir"/../nvidia/*/lib; do [ -d "$d" ] && lib="$lib:$(cd "$d" && pwd)"; done
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TCH_SCOPE_BUNDLE="$b"
TCH_SCOPE_PYTHON=$(command -v "$py") && export TCH_SCOPE_PYTHON
# PyTorch sees a GPU: a CUDA test that finds none fails rather than skips.
if [ "$cuda_seen" = True ]; then export TCH_SCOPE_EXPECT_CUDA=1; else unset TCH_SCOPE_EXPECT_CUDA; fi

read -r -a bins <<<"$(field bins)"
for bin in "${bins[@]}"; do
  missing=$(ldd "$b/bin/$bin" 2>&1 | grep 'not found' | awk '{print $1}' | tr '\n' ' ')
  [ -z "$missing" ] || refuse "$bin cannot load $missing(LD_LIBRARY_PATH: $LD_LIBRARY_PATH)"
done

# Per-test time limits (seconds): one test of tests/gpu.rs, one of the rest.
GPU_TEST_TIMEOUT=${GPU_TEST_TIMEOUT:-120}
TEST_TIMEOUT=${TEST_TIMEOUT:-100}
jobs=${GPU_JOBS:-$(( $(nproc) / 2 ))}
[ "$jobs" -ge 1 ] || jobs=1
[ "$jobs" -le 8 ] || jobs=8

# One test in a process of its own: writes <log> and <log>.rc.
run_one() {
  local bin=$1 name=$2 limit=$3 log=$4 t0 rc dt
  t0=$(date +%s%N)
  (cd "$work/run" && timeout -k 10 "$limit" "$b/bin/$bin" --exact "$name" --include-ignored \
    --nocapture --test-threads=1) >"$log" 2>&1
  rc=$?
  dt=$(( ($(date +%s%N) - t0) / 100000000 ))
  echo "$rc $((dt / 10)).$((dt % 10))" >"$log.rc"
}
export -f run_one
export b work

mkdir -p "$work/run" "$work/logs"
: >"$work/list"
for bin in "${bins[@]}"; do
  limit=$TEST_TIMEOUT
  [ "$bin" = gpu ] && limit=$GPU_TEST_TIMEOUT
  "$b/bin/$bin" --list 2>/dev/null | sed -n 's/: test$//p' | while read -r name; do
    echo "$bin $name $limit $work/logs/$bin.$(tr -c 'A-Za-z0-9_.\n-' '_' <<<"$name").log"
  done >>"$work/list"
done
say "torch $have_full at $torch_dir, CUDA seen by PyTorch: $cuda_seen; $(wc -l <"$work/list") tests, $jobs at a time"

grep '^gpu ' "$work/list" | while read -r bin name limit log; do run_one "$bin" "$name" "$limit" "$log"; done
grep -v '^gpu ' "$work/list" | xargs -P "$jobs" -L 1 bash -c 'run_one "$@"' _
"$py" "$b/gpu-figures.py" >"$work/logs/python-figures.log" 2>&1
py_rc=$?

# The summary.
passed=0 failed=0 skipped=0
rows="$work/rows" details="$work/details" figures="$work/figures"
: >"$rows"; : >"$details"; : >"$figures"; : >"$out/gpu-logs.txt"
while read -r bin name limit log; do
  read -r rc secs <"$log.rc" || { rc=999 secs=?; }
  skip=$(sed -n 's/.*GPU-SKIP [^ ]*: //p' "$log" | head -n1)
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    word=failed why="timed out after $limit s"
  elif [ "$rc" != 0 ]; then
    word=failed why="exit $rc: $(grep -m1 -A2 'panicked at' "$log" | tail -n +2 | head -n2 | tr '\n' ' ' | cut -c1-200)"
  elif ! grep -q 'test result: ok. 1 passed' "$log"; then
    word=failed why="the test did not run (not found by --exact?)"
  elif [ -n "$skip" ]; then
    word=skipped why=$skip
  else
    word=passed why=
  fi
  case $word in
    passed) passed=$((passed + 1)) ;;
    skipped) skipped=$((skipped + 1)) ;;
    failed) failed=$((failed + 1)); { echo "--- $bin $name ($why)"; tail -n 25 "$log"; } >>"$details" ;;
  esac
  printf '%-8s %-12s %6ss  %s%s\n' "$word" "$bin" "$secs" "$name" "${why:+: $why}" >>"$rows"
  grep 'GPU-FIGURE ' "$log" | sed "s/.*GPU-FIGURE /  $bin $name: /" >>"$figures"
  { echo "=== $bin $name: $word${why:+: $why} ($secs s)"; cat "$log"; } >>"$out/gpu-logs.txt"
done <"$work/list"
pylog="$work/logs/python-figures.log"
{ echo "=== python3 gpu-figures.py (exit $py_rc)"; cat "$pylog"; } >>"$out/gpu-logs.txt"
grep 'GPU-FIGURE ' "$pylog" | sed 's/.*GPU-FIGURE /  python3 gpu-figures.py: /' >>"$figures"
grep 'GPU-SKIP ' "$pylog" | sed 's/.*GPU-SKIP [^ ]*: /  python3 gpu-figures.py: skipped: /' >>"$figures"
[ "$py_rc" = 0 ] || { failed=$((failed + 1)); { echo "--- gpu-figures.py (exit $py_rc)"; tail -n 25 "$pylog"; } >>"$details"; }

{
  echo "tch-scope GPU run, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(( $(date +%s) - start )) s"
  echo "bundle: $(tr '\n' ' ' <"$b/BUNDLE")"
  echo "machine: $(uname -n), torch $have_full at $torch_dir, CUDA seen by PyTorch: $cuda_seen"
  command -v nvidia-smi >/dev/null && echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n1)"
  echo "tests: $passed passed, $failed failed, $skipped skipped"
  echo
  echo "figures:"
  if [ -s "$figures" ]; then cat "$figures"; else echo "  (none)"; fi
  echo
  echo "tests (status, binary, seconds, name[: reason]):"
  cat "$rows"
  if [ -s "$details" ]; then echo; echo "failures (last lines of each):"; cat "$details"; fi
} >"$out/gpu-summary.txt"
cat "$out/gpu-summary.txt"
[ "$failed" = 0 ]
