#!/usr/bin/env bash
# TorchScript against AOTInductor .pt2, on its own:
#   bash scripts/bench/aoti.sh
# 1. scripts/bench/aoti.py export: the MLP the serving tests serve and a
#    small conv net, as TorchScript and as .pt2 packages (batch 1 and 32),
#    once into target/bench/aoti-<key of the script and the torch>/
# 2. examples/benches/aoti.rs (release): CModule and Package latency at
#    batch 1 and 32, throughput with 1 and 2 workers, one JSON line each
# 3. scripts/bench/aoti.py python: Python's aoti_load_package runner
# then one markdown table on stdout (target/bench/aoti.md). Benchmarks
# report; nothing here fails on a missed goal. AOTI_BENCH_LATENCY_S and
# AOTI_BENCH_THROUGHPUT_S set each measurement's seconds (1 and 1.5).
set -euo pipefail
cd "$(dirname "$0")/../.."

PY="${TCH_SCOPE_PYTHON:-$(readlink -f .libtorch)/../../../../bin/python}"
CARGO="${CARGO:-cargo}"
OUT=target/bench
KEY=$( (cat scripts/bench/aoti.py scripts/export_pt2.py; readlink -f .libtorch) | cksum | cut -d' ' -f1)
DIR="$PWD/$OUT/aoti-$KEY"  # absolute: cargo bench runs in examples/
mkdir -p "$OUT"

if [ ! -f "$DIR/conv_b32.pt2" ]; then
  echo "aoti bench: exporting the models into $DIR" >&2
  rm -rf "$DIR.tmp"
  "$PY" -W ignore scripts/bench/aoti.py export "$DIR.tmp"
  mv "$DIR.tmp" "$DIR"
fi
cat /proc/loadavg >"$OUT/aoti-loadavg-start"
"$CARGO" bench -p examples --bench aoti -- "$DIR" >"$OUT/aoti.jsonl"
"$PY" -W ignore scripts/bench/aoti.py python "$DIR" >>"$OUT/aoti.jsonl"
cat /proc/loadavg >"$OUT/aoti-loadavg-end"

python3 - "$OUT/aoti.jsonl" <<'PY' | tee "$OUT/aoti.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
lat = {(r["model"], r["format"], r["runner"], r["batch"]): r for r in rows if "median_us" in r}
tput = {(r["model"], r["format"], r["batch"], r["workers"]): r["runs_per_s"] for r in rows if "runs_per_s" in r}
print("| model | batch | TorchScript `CModule` µs | `.pt2` `Package` µs | `.pt2` / TorchScript | Python `aoti_load_package` µs |")
print("|---|---|---|---|---|---|")
for m in ("mlp", "conv"):
    for b in (1, 32):
        ts = lat[(m, "torchscript", "rust tch-scope", b)]["median_us"]
        pt = lat[(m, "pt2", "rust tch-scope", b)]["median_us"]
        py = lat.get((m, "pt2", "python aoti_load_package", b), {}).get("median_us", float("nan"))
        print(f"| {m} | {b} | {ts:.1f} | {pt:.1f} | {pt / ts:.2f} | {py:.1f} |")
print()
print("| model | format | batch | 1 worker runs/s | 2 workers runs/s | 2 / 1 |")
print("|---|---|---|---|---|---|")
for m in ("mlp", "conv"):
    for f in ("torchscript", "pt2"):
        for b in (1, 32):
            one, two = tput[(m, f, b, 1)], tput[(m, f, b, 2)]
            print(f"| {m} | {f} | {b} | {one:.0f} | {two:.0f} | {two / one:.2f} |")
PY
