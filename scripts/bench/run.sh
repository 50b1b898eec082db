#!/usr/bin/env bash
# `make bench`: every benchmark in one run on one machine, then one
# markdown report: stdout, target/bench/results.md, and the results section
# of docs/benchmarks.md (collect.py rewrites it between its markers).
#   1. libtorch's own C++ guards (c10_guards.cpp), the floor
#   2. criterion: each scope word, tch-scope and raw tch (runtime/benches/scopes.rs),
#      then one span in tch-scope and in other span recorders
#      (examples/benches/peers.rs: fastrace, puffin, tracing + tracing-chrome)
#   3. PyTorch Python's context managers (python_scopes.py)
#   4. the deep-MLP workload, each variant in its own process, Rust and Python
#   5. training memory: recompute against the plain model, Rust and Python
#   6. what a checkpoint costs a training loop (runtime/benches/resume.rs)
#   7. compile cost of the macros (compile_cost.py; slow on its first run)
# and the floors: timed with the trace on, a switched-off report,
# no_grad + eval on a 1000-module model (deep_model.py), memory_scope.
# Steps run one after another so they don't compete for the cores.
# Benchmarks report; nothing here fails on a missed target.
set -euo pipefail
cd "$(dirname "$0")/../.."

OUT=target/bench
PY="${TCH_SCOPE_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/tch-scope/venv-torch-2.13.0/bin/python}"
CARGO="${CARGO:-cargo}"
WARM="${BENCH_WARM_UP:-1}"
MEASURE="${BENCH_MEASURE:-2}"
say() { echo "bench: $*" >&2; }

mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.jsonl "$OUT"/modules_1000.pt
cat /proc/loadavg >"$OUT/loadavg-start"

say "building the benches"
"$CARGO" bench -p tch-scope --no-run --quiet
# Without examples' default `metrics`: see examples/benches/peers.rs.
PEERS=(-p examples --no-default-features --features peers --bench peers)
"$CARGO" bench "${PEERS[@]}" --no-run --quiet
"$CARGO" bench -p examples --features peers --bench peers --no-run --quiet

if command -v g++ >/dev/null; then
  say "libtorch C++ guards"
  torch=$(readlink -f .libtorch)
  g++ -O2 -std=c++20 -D_GLIBCXX_USE_CXX11_ABI=1 -w -I"$torch/include" \
    scripts/bench/c10_guards.cpp -o "$OUT/c10_guards" \
    -L"$torch/lib" -Wl,--no-as-needed -ltorch_cpu -lc10 -Wl,-rpath,"$torch/lib"
  "$OUT/c10_guards" >"$OUT/c10.json" 2>/dev/null
else
  say "no g++: skipping libtorch's C++ guards"
fi

# The 1000-module TorchScript model of the `no_grad, eval(model)` floor
#, for criterion and for Python alike.
if [ -x "$PY" ]; then
  say "exporting the 1000-module model"
  "$PY" -W ignore scripts/bench/deep_model.py "$OUT/modules_1000.pt"
fi

say "criterion (scopes)"
export CRITERION_HOME="$PWD/$OUT/criterion"
rm -rf "$CRITERION_HOME"
"$CARGO" bench -p tch-scope --bench scopes --quiet -- \
  --warm-up-time "$WARM" --measurement-time "$MEASURE" --noplot 2>&1 |
  grep -E '^[a-z_]+/|time:' >&2

say "criterion (peers)"
cat /proc/loadavg >"$OUT/loadavg-peers"
"$CARGO" bench "${PEERS[@]}" --quiet -- \
  --warm-up-time "$WARM" --measurement-time "$MEASURE" --noplot 2>&1 |
  grep -E '^[a-z_]+/|time:' >&2

# The `metrics` feature's cost per timed run: the same bench built with
# examples' default features (`metrics` on), only its group `metrics`.
say "criterion (metrics feature)"
METRICS=(-p examples --features peers --bench peers)
"$CARGO" bench "${METRICS[@]}" --quiet -- metrics/ \
  --warm-up-time "$WARM" --measurement-time "$MEASURE" --noplot 2>&1 |
  grep -E '^[a-z_]+/|time:' >&2

if [ -x "$PY" ]; then
  say "PyTorch Python context managers"
  "$PY" -W ignore scripts/bench/python_scopes.py "$OUT/python.json" "$OUT/modules_1000.pt"
else
  say "no $PY (make libtorch installs it): no Python columns"
fi

# Rounds interleave the variants, so a burst of load elsewhere doesn't land
# on one variant only; collect.py keeps each variant's fastest process.
say "MLP workload, one process per variant, ${MLP_ROUNDS:=4} rounds"
for _ in $(seq "$MLP_ROUNDS"); do
  for v in grad no_grad inference_mode deadline; do
    "$CARGO" bench -p tch-scope --bench mlp --quiet -- "$v" >>"$OUT/mlp.jsonl"
    # Python has no per-operator deadline to compare with.
    if [ -x "$PY" ] && [ "$v" != deadline ]; then
      "$PY" -W ignore scripts/bench/python_mlp.py "$v" >>"$OUT/mlp.jsonl"
    fi
  done
done

# Training memory: recompute against the plain model, Rust and Python
# (docs/benchmarks.md's training-memory section).
say "training memory (recompute)"
rm -f "$OUT/recompute.jsonl"
"$CARGO" bench -p tch-scope --bench recompute --quiet -- run >>"$OUT/recompute.jsonl"
if [ -x "$PY" ]; then
  "$PY" -W ignore scripts/bench/python_recompute.py >>"$OUT/recompute.jsonl" 2>/dev/null
fi
python3 scripts/bench/recompute_table.py "$OUT/recompute.jsonl" | tee "$OUT/recompute.md"

# What a checkpoint costs a training loop (runtime/benches/resume.rs): the
# step with no checkpoint, with the state held at each boundary, with
# `every = 10` in the background, and the synchronous figure beside it; two
# MLPs, and a head trained over a frozen table (one save: many steps) at
# batch 64, where Adam is a quarter of the step, and at batch 256 with a
# table four times larger (the forward and backward dominate, as in most
# training; one save still takes 5-6 steps).
say "checkpoint cost (resume)"
rm -f "$OUT/resume.jsonl"
for size in "mlp 256 3 64 0" "mlp 1024 4 1 0" "head 128 2 64 40000" "head 128 2 256 160000"; do
  set -- $size
  MALLOC_MMAP_THRESHOLD_=67108864 MALLOC_TRIM_THRESHOLD_=1073741824 \
    RESUME_MODEL=$1 RESUME_WIDTH=$2 RESUME_LAYERS=$3 RESUME_BATCH=$4 \
    RESUME_VOCAB=$5 RESUME_HIDDEN=768 RESUME_ROUNDS=7 \
    "$CARGO" bench -p tch-scope --bench resume --quiet >>"$OUT/resume.jsonl"
done
python3 - "$OUT/resume.jsonl" <<'PY' | tee "$OUT/resume.md"
import json, sys
print("| model | trained (frozen) params | plain step | boundary (the copy it replaced) | every = 10, background | every = 10, synchronous | one save (steps) | first boundary |")
print("|:--|--:|--:|--:|--:|--:|--:|--:|")
for line in open(sys.argv[1]):
    r = json.loads(line)
    frozen = f" ({r['frozen']:,})" if r['frozen'] else ""
    shape = f" {r['layers']} × {r['width']}" if r['model'] == "mlp" else ""
    name = f"{r['model']}{shape}, batch {r['batch']}"
    print(f"| {name} | {r['params']:,}{frozen} | {r['plain_ms']:.2f} ms | {r['boundary_ms']:+.2f} ms ({r['copy_ms']:.2f} ms) "
          f"| {r['every10_background_ms']:.2f} ms ({r['background_ratio']:.2f}×) "
          f"| {r['every10_sync_ms']:.2f} ms ({r['sync_ratio']:.2f}×) "
          f"| {r['save_ms']:.1f} ms ({r['save_in_steps']:.1f}) | {r['first_boundary_ms']:.1f} ms |")
PY

say "compile cost"
python3 scripts/bench/compile_cost.py "$OUT/compile_cost.json"

cat /proc/loadavg >"$OUT/loadavg-end"
python3 scripts/bench/collect.py "$OUT" docs/benchmarks.md | tee "$OUT/results.md"
