#!/usr/bin/env bash
# `make bench-against REV=<commit> [WORDS=regex] [ROUNDS=n]`: the criterion
# scope benches of another commit and of the working tree, in one run,
# round after round (REV, then this tree), so that both meet the same
# state of the machine. Prints each round's medians and, per bench, the
# ratio of this tree's best round to REV's best round.
#   REV     a commit (a worktree of it is built under target/against/)
#   WORDS   a criterion filter (default: the process-wide words, eval,
#           deadline, and no_grad as the reference)
#   ROUNDS  rounds (default 3)
# Knobs as make bench: BENCH_WARM_UP, BENCH_MEASURE (seconds).
set -euo pipefail
cd "$(dirname "$0")/../.."

REV="${REV:?REV=<commit> to compare against}"
WORDS="${WORDS:-^(no_grad|detect_anomaly|deterministic|cudnn|eval|train|deadline)/tch_scope\$}"
ROUNDS="${ROUNDS:-3}"
WARM="${BENCH_WARM_UP:-1}"
MEASURE="${BENCH_MEASURE:-3}"
CARGO="${CARGO:-cargo}"
ROOT="$PWD"
OUT="$ROOT/target/against"
say() { echo "against: $*" >&2; }

sha=$(git rev-parse --short "$REV")
tree="$OUT/tree-$sha"
mkdir -p "$OUT"
if [ ! -d "$tree" ]; then
  say "a worktree of $sha"
  git worktree add --detach "$tree" "$sha" >/dev/null
fi
# The same libtorch (and gloo) as this tree.
for l in .libtorch .gloo; do
  [ -e "$l" ] && ln -sfn "$(readlink -f "$l")" "$tree/$l"
done

say "building both benches"
(cd "$tree" && CARGO_TARGET_DIR="$OUT/target-$sha" "$CARGO" bench -p tch-scope --bench scopes --no-run --quiet)
"$CARGO" bench -p tch-scope --bench scopes --no-run --quiet

run() { # label dir target-dir
  (cd "$2" && CRITERION_HOME="$OUT/criterion-$1" CARGO_TARGET_DIR="$3" \
    "$CARGO" bench -p tch-scope --bench scopes --quiet -- \
    --warm-up-time "$WARM" --measurement-time "$MEASURE" --noplot "$WORDS" 2>&1 |
    grep -E '^[a-z_]+/|time:' | sed "s/^/$1 /")
}

log="$OUT/$sha.log"
: >"$log"
for r in $(seq "$ROUNDS"); do
  say "round $r of $ROUNDS"
  run "$sha" "$tree" "$OUT/target-$sha" | tee -a "$log" >&2
  run tree "$ROOT" "${CARGO_TARGET_DIR:-$ROOT/target}" | tee -a "$log" >&2
done
python3 - "$log" "$sha" <<'EOF' | tee "$OUT/$sha.md"
import re, sys, collections
got, cur = collections.defaultdict(list), None
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) ([a-z_]+/[a-z_0-9]+)", line)
    if m:
        cur = (m.group(1), m.group(2))
    t = re.search(r"time:\s+\[\S+ \S+ (\S+) (\S+)", line)
    if t and cur:
        v = float(t.group(1)) * {"ps": 1e-3, "ns": 1, "µs": 1e3, "ms": 1e6}[t.group(2)]
        got[cur].append(v)
sha = sys.argv[2]
print(f"| bench | {sha}, each round, ns | this tree, each round, ns | best ÷ best |")
print("|---|--:|--:|--:|")
for bench in sorted({b for _, b in got}):
    a, b = got[(sha, bench)], got[("tree", bench)]
    if a and b:
        fmt = lambda xs: " / ".join(f"{x:.1f}" for x in xs)
        print(f"| `{bench}` | {fmt(a)} | {fmt(b)} | {min(b) / min(a):.2f}× |")
EOF
