"""Formats target/bench/recompute.jsonl (runtime/benches/recompute.rs and
scripts/bench/python_recompute.py) as the markdown table of
docs/benchmarks.md's training-memory section. Usage:
recompute_table.py recompute.jsonl"""

import json
import sys


def mib(n):
    return f"{n / 2**20:.1f}"


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    by = {(r["lang"], r["variant"]): r for r in rows}
    print("| | plain | recompute | ratio | step ms plain → recompute (ratio) | grads bitwise |")
    print("|---|--:|--:|--:|---|---|")
    for lang, label in (("rust", "tch-scope"), ("python", "PyTorch `checkpoint`")):
        p, r = by.get((lang, "plain")), by.get((lang, "recompute"))
        if not p or not r:
            continue
        for key, what in (("retained", "held for backward (MiB)"), ("step_peak", "step peak (MiB)")):
            print(f"| {label}: {what} | {mib(p[key])} | {mib(r[key])} | "
                  f"{r[key] / p[key]:.2f} | {p['step_ms']} → {r['step_ms']} "
                  f"({r['step_ms'] / p['step_ms']:.2f}) | {r['bitwise']} |")
    for lang, label in (("rust", "tch-scope `Function::apply`"),
                        ("python", "`torch.autograd.Function.apply`")):
        r = by.get((lang, "plain"))
        if r:
            print(f"\n{label}: {r['apply_ns']} ns per call of a one-`mul` function; "
                  f"a plain `mul`: {r['mul_ns']} ns.")
    l = rows[0] if rows else {}
    print(f"\nMLP of {l.get('layers')} × Linear({l.get('width')}) + ReLU + dropout 0.1, "
          f"batch {l.get('batch')}, recomputed every {l.get('every')} layers.")


if __name__ == "__main__":
    main()
