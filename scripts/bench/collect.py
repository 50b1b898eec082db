"""Reads what scripts/bench/run.sh measured (target/bench/) and prints the
results section of docs/benchmarks.md as markdown; given that file as a
second argument, also writes the section into it, between the markers
BEGIN and END below (the prose around them is kept), and the section
"Against other span recorders" between PEERS_BEGIN and PEERS_END. With
`--only peers` as a third argument, only that section (the criterion group
`peers`, examples/benches/peers.rs, run on its own), leaving the rest as
measured before. Stdlib only; a missing input leaves its cells as "—"
rather than failing (benchmarks report, they never fail)."""

import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys

OUT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/bench")
DOC = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else None
ONLY = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--only" else None
BEGIN = "<!-- make bench writes from here -->"
END = "<!-- to here -->"
PEERS_BEGIN = "<!-- make bench writes the peers from here -->"
PEERS_END = "<!-- to here (peers) -->"

# (criterion group, shown as, PyTorch Python equivalent, raw tch equivalent)
WORDS = [
    ("no_grad", "`no_grad`", "`torch.no_grad()`", "`tch::no_grad_guard()`"),
    ("enable_grad", "`enable_grad`", "`torch.enable_grad()`", "`tch::with_grad(f)`"),
    ("grad", "`grad(false)`", "`torch.set_grad_enabled(False)`", ""),
    ("inference_mode", "`inference_mode`", "`torch.inference_mode()`", ""),
    ("device", "`device(cpu)`", '`torch.device("cpu")` ¹', ""),
    ("timed", "`timed`", "a `perf_counter_ns` timer class ²", "2 × `Instant::now()` ³"),
    ("memory_scope", "`memory_scope`", "—", ""),
    ("seed", "`seed(7)`", "`fork_rng(devices=[])` + `manual_seed(7)`", ""),
    ("fork_rng", "`fork_rng`", "`torch.random.fork_rng(devices=[])`", ""),
    ("autocast", "`autocast(cpu, bf16)`", '`torch.autocast("cpu", torch.bfloat16)`', ""),
    ("record", '`record("x")`', '`torch.profiler.record_function("x")`', ""),
    ("detect_anomaly", "`detect_anomaly`", "`torch.autograd.detect_anomaly()`", ""),
    ("deterministic", "`deterministic`", "`use_deterministic_algorithms` save/set/restore", ""),
    ("eval", "`eval(model)` ⁴", "`was = m.training; m.eval()` … `m.train(was)`", "`set_eval()` … `set_train()` ⁵"),
    ("train", "`train(model)` ⁴", "`was = m.training; m.train()` … `m.train(was)`", "`set_train()` … `set_train()` ⁵"),
    ("no_grad_eval", "`no_grad, eval(model)` ⁴", "`torch.no_grad()` + the eval helper", "`no_grad_guard()` + `set_eval()` … `set_train()` ⁵"),
    ("matmul_precision", '`matmul_precision("high")`', "`set_float32_matmul_precision` save/set/restore", ""),
    ("tf32", "`tf32(true)`", "`backends.cuda.matmul.allow_tf32` save/set/restore", ""),
    ("cudnn", "`cudnn(benchmark, deterministic)`", "`torch.backends.cudnn.flags(...)`", ""),
    ("sdpa", "`sdpa(math)`", "`sdpa_kernel([SDPBackend.MATH])`", ""),
    ("inference_mode_false", "`inference_mode(false)` inside `inference_mode`", "`torch.inference_mode(False)` inside `inference_mode()`", ""),
    ("deadline", "`deadline(d)`", "a `SIGALRM` timeout class (`signal` + `setitimer`) ⁶", ""),
]
# Absolute targets, ns.
ABS_TARGET = {"no_grad": 10.0, "inference_mode": 15.0}

PY_RATIO_TARGET = 50.0


def load(name):
    try:
        return json.loads((OUT / name).read_text())
    except (OSError, ValueError):
        return None


def criterion(group, func):
    home = pathlib.Path(os.environ.get("CRITERION_HOME", OUT / "criterion"))
    try:
        est = json.loads((home / group / func / "new" / "estimates.json").read_text())
    except (OSError, ValueError):
        return None
    return est["median"]["point_estimate"]


def ns(v):
    if v is None:
        return "—"
    if v >= 10_000:
        return f"{v / 1000:,.1f} µs"
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}"


def ratio(a, b):
    return "—" if a is None or b is None or b == 0 else f"{a / b:,.1f}×"


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def machine():
    model = sh("lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1") or platform.processor()
    cores = os.cpu_count()
    mem = sh("awk '/MemTotal/ {printf \"%.0f GiB\", $2/1048576}' /proc/meminfo")
    rustc = sh("rustc --version")
    py = load("python.json") or {}
    meta = py.get("_meta", {})
    load_start = (OUT / "loadavg-start").read_text().split()[:3] if (OUT / "loadavg-start").exists() else []
    load_end = (OUT / "loadavg-end").read_text().split()[:3] if (OUT / "loadavg-end").exists() else []
    # When the run ended (so collecting again later keeps the run's date).
    end = OUT / "loadavg-end"
    when = end.stat().st_mtime if end.exists() else None
    date = datetime.datetime.fromtimestamp(when, datetime.timezone.utc) if when else datetime.datetime.now(datetime.timezone.utc)
    date = date.strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Measured {date} on {model}, {cores} cores, {mem}, Linux {platform.release()}, no GPU; "
        f"libtorch 2.13.0 (CPU, from the PyPI wheel), {rustc}"
        + (f", PyTorch {meta['torch']} on Python {meta['python']}" if meta else "")
        + f". Load average {' '.join(load_start)} at the start, {' '.join(load_end)} at the end"
        "."
    ]
    # Only the start says whether other work was running: by the end the
    # load average holds the bench's own MLP processes and builds.
    busy = [float(x) for x in load_start[:1]]
    if busy and max(busy) > 0.5 * (cores or 1):
        lines.append(
            "**The machine was busy with other work during this run**: absolute numbers are upper "
            "bounds, and the columns of one row were measured minutes apart, under different load."
        )
    return lines


def scope_table():
    c10 = load("c10.json") or {}
    py = load("python.json") or {}
    rows = [
        "| scope | tch-scope ns | raw tch ns | libtorch C++ guard ns | PyTorch Python ns "
        "| raw tch ÷ tch-scope | Python ÷ tch-scope | target | PyTorch Python equivalent |",
        "|---|--:|--:|--:|--:|--:|--:|---|---|",
    ]
    met, missed = [], []
    for group, shown, py_eq, raw_eq in WORDS:
        ours = criterion(group, "tch_scope")
        raw = criterion(group, "instant_x2" if group == "timed" else "tch")
        p = py.get(group)
        goals = []
        if group in ABS_TARGET and ours is not None:
            ok = ours <= ABS_TARGET[group]
            goals.append(f"≤ {ABS_TARGET[group]:.0f} ns {'✅' if ok else '❌'}")
            (met if ok else missed).append(f"{group} ≤ {ABS_TARGET[group]:.0f} ns ({ours:.1f} ns)")
        if group == "timed" and ours is not None and raw is not None:
            ok = ours <= 2 * raw
            goals.append(f"≤ 2× clock pair {'✅' if ok else '❌'}")
            (met if ok else missed).append(f"timed ≤ 2× two Instant::now() ({ours / raw:.2f}×)")
        if ours is not None and isinstance(p, (int, float)):
            ok = p / ours >= PY_RATIO_TARGET
            goals.append(f"≥ 50× Python {'✅' if ok else '❌'}")
            (met if ok else missed).append(f"{group} ≥ 50× Python ({p / ours:,.1f}×)")
        raw_cell = ns(raw) + (f" ({raw_eq})" if raw_eq and raw is not None else "")
        raw_ratio = ratio(raw, ours)
        if group == "timed":
            # Here the raw column is the floor: show how far above it we are.
            raw_ratio = "tch-scope = " + ratio(ours, raw)
        rows.append(
            f"| {shown} | {ns(ours)} | {raw_cell} | {ns(c10.get(group))} | "
            f"{ns(p if isinstance(p, (int, float)) else None)} | {raw_ratio} | "
            f"{ratio(p if isinstance(p, (int, float)) else None, ours)} | {' '.join(goals)} | {py_eq} |"
        )
    extra = []
    for func, label in [("tch_scope_attr", "`#[no_grad] fn`"), ("tch_scope_enter", "`NoGrad.enter()` guard")]:
        v = criterion("no_grad", func)
        if v is not None:
            extra.append(f"{label} {ns(v)} ns")
    return rows, extra, met, missed


def deadline_op():
    """What an open deadline adds to each operator (a 4-float relu)."""
    bare, inside = criterion("deadline_op", "tch"), criterion("deadline_op", "tch_scope")
    if bare is None or inside is None:
        return None
    return (f"Inside an open `deadline`, each operator pays the dispatcher check: a 4-float "
            f"`relu` took {ns(inside)} ns against {ns(bare)} ns outside (+{ns(inside - bare)} ns "
            "per operator; the deep-MLP row `deadline` below shows it on a real forward).")


def cell(v):
    """ns() with its unit: "12.9 µs" stays, "2.2" becomes "2.2 ns"."""
    t = ns(v)
    return t if t.endswith("µs") or t == "—" else t + " ns"


def floor_table():
    """The floors, each a ratio of two numbers from this one run."""
    py = load("python.json") or {}
    traced = criterion("timed", "tch_scope_traced")
    clock2 = criterion("timed", "instant_x2")
    off = criterion("timed", "tch_scope_disabled")
    empty = criterion("timed", "empty")
    deep = criterion("no_grad_eval_1000", "tch_scope")
    deep_py = py.get("no_grad_eval_1000")
    mem = criterion("memory_scope", "tch_scope")
    rows = [
        "| floor | measured | against | ratio | target |",
        "|---|--:|--:|--:|---|",
    ]
    met, missed = [], []

    def goal(ok, text):
        (met if ok else missed).append(text)
        return "✅" if ok else "❌"

    if traced is not None and clock2 is not None:
        r = traced / clock2
        rows.append(f"| `timed`, trace recording | {cell(traced)} | 2 × `Instant::now()` {cell(clock2)} | "
                    f"{r:.2f}× | ≤ 0.75× {goal(r <= 0.75, f'timed traced ≤ 0.75× two Instant::now() ({r:.2f}×)')} |")
    if off is not None:
        net = off - (empty or 0)
        rows.append(f"| `timed`, `report::set_enabled(false)` | {cell(off)} | the empty loop {cell(empty)} | "
                    f"+{net:.1f} ns | ≤ 2 ns {goal(off <= 2.0, f'switched-off scope ≤ 2 ns ({off:.1f} ns)')} |")
    if deep is not None:
        r = deep_py / deep if isinstance(deep_py, (int, float)) else None
        rows.append(f"| `no_grad, eval(model)`, 1000 modules ⁷ | {cell(deep)} | PyTorch Python "
                    f"{cell(deep_py if r else None)} | {ratio(deep_py if r else None, deep)} | ≥ 200× "
                    + (goal(r >= 200, f"eval 1000 modules ≥ 200× Python ({r:,.0f}×)") if r else "") + " |")
    if mem is not None:
        rows.append(f"| `memory_scope` | {cell(mem)} | 10 µs | {mem / 10_000:.2f}× | ≤ 1× "
                    f"{goal(mem <= 10_000, f'memory_scope ≤ 10 µs ({mem / 1000:.1f} µs)')} |")
    # The `metrics` feature (examples/benches/peers.rs, group `metrics`):
    # what a timed run adds beyond the recorder's own work.
    without = criterion("metrics", "timed_without")
    prom = criterion("metrics", "timed_prometheus")
    record = criterion("metrics", "prometheus_record")
    bare = criterion("metrics", "timed_no_recorder")
    if None not in (without, prom, record):
        extra = prom - without - record
        rows.append(f"| `metrics` feature, Prometheus recorder ⁸ | {cell(prom)} | without the feature "
                    f"{cell(without)} + the recorder's own `record` {cell(record)} | +{extra:.1f} ns | ≤ 10 ns "
                    f"{goal(extra <= 10.0, f'metrics feature ≤ 10 ns per timed run ({extra:.1f} ns)')} |")
    if None not in (without, bare):
        rows.append(f"| `metrics` feature, no recorder installed ⁸ | {cell(bare)} | without the feature "
                    f"{cell(without)} | +{bare - without:.1f} ns | |")
    return rows, met, missed


def against_table():
    """The newest `make bench-against` table (target/against/*.md), as it
    was written: the scope benches of another commit and of the tree, in
    one run of their own."""
    tables = sorted((OUT.parent / "against").glob("*.md"), key=lambda p: p.stat().st_mtime)
    if not tables:
        return []
    t = tables[-1]
    when = datetime.datetime.fromtimestamp(t.stat().st_mtime, datetime.timezone.utc)
    return [f"Against commit {t.stem} (`make bench-against REV={t.stem}`, its own run, ended "
            f"{when.strftime('%Y-%m-%d %H:%M UTC')}; rounds alternate the two builds):", ""] + \
        t.read_text().strip().splitlines()


def bytes_cell(r, key):
    """A byte count with thousands separators; — from runs before the field."""
    return f"{r[key]:,}" if key in r else "—"


def mlp_table():
    runs = []
    try:
        for line in (OUT / "mlp.jsonl").read_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                runs.append(json.loads(line))
    except OSError:
        return [], ""
    by = {}
    for r in runs:  # each variant's fastest process (see run.sh)
        k = (r["lang"], r["variant"])
        if k not in by or r["ms_median"] < by[k]["ms_median"]:
            by[k] = r
    rounds = max(sum(1 for r in runs if (r["lang"], r["variant"]) == k) for k in by)
    if not runs:
        return [], ""
    r0 = runs[0]
    head = (f"Deep MLP forward on the CPU: {r0['layers']} × Linear({r0['width']}, {r0['width']}) "
            f"+ ReLU, batch {r0['batch']}, fp32, {r0['threads']} threads; median of {r0['iters']} "
            "passes after one warm-up; each variant in its own process, the fastest of "
            f"{rounds} such processes. Peak = VmHWM; "
            "growth = VmHWM − VmRSS after building the model and input (weights: "
            f"{r0['layers'] * r0['width'] * (r0['width'] + 1) * 4 / 2**20:,.0f} MiB). "
            "Activations: one more forward, output dropped inside, measured exactly in "
            "tensor bytes (tch-scope: `tensor_memory`; Python: "
            "`torch.profiler.profile(profile_memory=True)`'s `[memory]` events): the peak "
            "of the bytes it held live, and all it allocated.")
    rows = [
        "| variant | lang | ms / forward | speed-up vs grad | peak RSS MiB | peak growth MiB | growth vs grad "
        "| activations peak, bytes | activations allocated, bytes |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for lang in ("rust", "python"):
        base = by.get((lang, "grad"))
        for v in ("grad", "no_grad", "inference_mode", "deadline"):
            r = by.get((lang, v))
            if not r:
                continue
            growth = (r["hwm_kib"] - r["rss_before_kib"]) / 1024
            bgrowth = (base["hwm_kib"] - base["rss_before_kib"]) / 1024 if base else None
            name = {"grad": "grad tracking", "no_grad": "`no_grad`", "inference_mode": "`inference_mode`",
                    "deadline": "grad tracking in `deadline` (never passed)"}[v]
            rows.append(
                f"| {name} | {'tch-scope' if lang == 'rust' else 'PyTorch Python'} | {r['ms_median']:.0f} | "
                f"{ratio(base['ms_median'], r['ms_median']) if base else '—'} | {r['hwm_kib'] / 1024:,.0f} | "
                f"{growth:,.0f} | {ratio(growth, bgrowth) if bgrowth else '—'} | "
                f"{bytes_cell(r, 'act_peak_bytes')} | {bytes_cell(r, 'act_allocated_bytes')} |"
            )
    claims = []
    for lang, label in (("rust", "tch-scope"), ("python", "PyTorch Python")):
        g, n = by.get((lang, "grad")), by.get((lang, "no_grad"))
        if g and n:
            claims.append(
                f"{label}: {g['ms_median'] / n['ms_median']:.2f}× the speed, "
                f"{g['hwm_kib'] / n['hwm_kib']:.2f}× less peak RSS, "
                f"{(g['hwm_kib'] - g['rss_before_kib']) / max(n['hwm_kib'] - n['rss_before_kib'], 1):.1f}× "
                "less memory growth")
    g, d = by.get(("rust", "grad")), by.get(("rust", "deadline"))
    if g and d:
        cost = d["ms_median"] / g["ms_median"] - 1
        rows += ["", f"`deadline` on this forward: {cost:+.1%} against grad tracking without it "
                 f"(goal ≤ 3 % {'✅' if cost <= 0.03 else '❌'}; run-to-run noise is larger)."]
    if claims:
        rows += ["", "The claim \"no_grad saves ~2× memory and 2-3× speed\", measured (no_grad vs grad "
                 "tracking): " + "; ".join(claims) + "."]
    return rows, head


def compile_table():
    c = load("compile_cost.json")
    if not c:
        return [], ""
    r = c["gen_macros_median_s"] / c["gen_manual_median_s"]
    head = (f"Compile cost ({c['profile']} profile, not incremental, median of "
            f"{len(c['gen_macros_s'])} rebuilds of the crate alone; dependencies already built):")
    rows = [
        "| crate | build s | |",
        "|---|--:|---|",
        f"| {c['fns']} fns with `#[no_grad]`, `#[timed]`, `scoped!(inference_mode => …)` | "
        f"{c['gen_macros_median_s']:.2f} | {r:.2f}× the hand-written crate "
        f"(goal ≤ 1.3×) {'✅' if r <= 1.3 else '❌'} |",
        f"| the same {c['fns']} fns written with guards by hand | {c['gen_manual_median_s']:.2f} | |",
        f"| `tch-scope-macros` itself | {c['macros_crate_median_s']:.2f} | |",
    ]
    return rows, head, r


# examples/benches/peers.rs: (function, recorder, what one span is there).
PEERS = [
    ("tch_scope_traced", "tch-scope `timed`, trace recording",
     "`trace::start()` (a ring of 65,536 slots), `scoped!(timed => …)`"),
    ("fastrace", "fastrace {fastrace}, reporting on",
     "`LocalSpan::enter_with_local_parent`, 1000 under a root `Span` + `set_local_parent`, "
     "a reporter that drops what it gets"),
    ("puffin_on", "puffin {puffin}, scopes on",
     "`profile_scope!`, 1000 in a frame scope, `GlobalProfiler::new_frame()` after each frame"),
    ("tracing_chrome", "tracing {tracing} + tracing-chrome {tracing-chrome}",
     "`span!(Level::INFO, \"x\").entered()`, tracing-chrome's layer writing JSON"),
    ("tch_scope_off", "tch-scope `timed`, `report::set_enabled(false)`", "`scoped!(timed => …)`"),
    ("puffin_off", "puffin {puffin}, `set_scopes_on(false)`", "`profile_scope!`"),
]


def lock_versions():
    """The peers' versions, from Cargo.lock."""
    vs = {}
    try:
        text = pathlib.Path("Cargo.lock").read_text()
    except OSError:
        return vs
    for block in text.split("[[package]]"):
        fields = dict(
            (k.strip(), v.strip().strip('"'))
            for k, _, v in (line.partition("=") for line in block.splitlines() if "=" in line)
        )
        if fields.get("name") in ("fastrace", "puffin", "tracing", "tracing-chrome"):
            vs[fields["name"]] = fields.get("version", "?")
    return vs


def peers_section():
    """One span in tch-scope and in other span recorders: the criterion group
    `peers`, in ns per span."""
    home = pathlib.Path(os.environ.get("CRITERION_HOME", OUT / "criterion"))
    got = {f: criterion("peers", f) for f, _, _ in PEERS}
    vs = {k: "" for k in ("fastrace", "puffin", "tracing", "tracing-chrome")}
    vs.update(lock_versions())
    out = ["## Against other span recorders", ""]
    est = [home / "peers" / f / "new" / "estimates.json" for f, _, _ in PEERS]
    est = [p for p in est if p.exists()]
    if est:
        when = datetime.datetime.fromtimestamp(max(p.stat().st_mtime for p in est), datetime.timezone.utc)
        model = sh("lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1") or platform.processor()
        load_at = OUT / "loadavg-peers"
        load_txt = (f"; load average {' '.join(load_at.read_text().split()[:3])} at its start"
                    if load_at.exists() else "")
        out += [f"Measured {when.strftime('%Y-%m-%d %H:%M UTC')} on {model}, {os.cpu_count()} cores, "
                f"{sh('rustc --version')}{load_txt}: one criterion run, one group "
                "(examples/benches/peers.rs, `cargo bench -p examples --no-default-features "
                "--features peers --bench peers`)."]
    out += [
        "",
        "One span, entered and left around an empty body, with each recorder keeping what it "
        "records; median ns per span. Spans are timed 1000 at a time (fastrace's README figure "
        "is a root and 1000 spans, divided by 1000); what a recorder's background thread does "
        "with them is drained between those batches, untimed, so memory stays bounded. "
        "tch-scope is built without its `metrics` feature.",
        "",
        "| recorder | one span | ns / span | ÷ tch-scope (on ÷ traced, off ÷ off) |",
        "|---|---|--:|--:|",
    ]
    for func, name, what in PEERS:
        ours = got["tch_scope_off" if func.endswith("_off") else "tch_scope_traced"]
        out.append(f"| {name.format(**vs)} | {what} | {ns(got[func])} | "
                   f"{'' if func.startswith('tch_scope') else ratio(got[func], ours)} |")
    met, missed = [], []
    out += ["", "| goal | ratio | |", "|---|--:|---|"]
    for a, b, text in (("tch_scope_traced", "fastrace", "tch-scope traced ≤ fastrace"),
                       ("tch_scope_off", "puffin_off", "tch-scope switched off ≤ puffin switched off")):
        x, y = got[a], got[b]
        if x is None or y is None:
            out.append(f"| {text} | — | |")
            continue
        ok = x <= y
        out.append(f"| {text} | {x / y:.2f}× | {'✅' if ok else '❌'} |")
        (met if ok else missed).append(f"{text} ({x / y:.2f}×)")
    cpu = {f: criterion("peers_cpu", f) for f in ("tch_scope_traced", "fastrace")}
    if None not in cpu.values():
        t, f = cpu["tch_scope_traced"], cpu["fastrace"]
        out += ["",
                "The same two spans by the process's CPU time, every thread's, the recorder's "
                "collection included (group `peers_cpu`): fastrace hands each span to its "
                "collector, whose work (`flush`, every 16 batches and at the end) the table above "
                "leaves out; tch-scope's span is complete in the ring and the report table when "
                "it ends.",
                "",
                "| recorder | CPU ns / span, all threads | ÷ tch-scope |",
                "|---|--:|--:|",
                f"| tch-scope `timed`, trace recording | {ns(t)} | |",
                f"| fastrace {vs['fastrace']}, reporting on | {ns(f)} | {ratio(f, t)} |"]
    out += ["", "Targets met: " + ("; ".join(met) or "—") + ".",
            "", "Targets missed: " + ("; ".join(missed) or "none") + "."]
    return out


def main():
    if ONLY == "peers":
        text = "\n".join(peers_section())
        print(text)
        if DOC:
            write_block(PEERS_BEGIN, PEERS_END, text)
        return
    out = ["## Results", ""]
    out += machine()
    out += ["", "Enter + leave of each scope, empty body, median ns (criterion for Rust, "
            "timeit for Python, a -O2 loop for C++):", ""]
    rows, extra, met, missed = scope_table()
    out += rows
    out += [""]
    if extra:
        out += ["`no_grad` spelled other ways: " + ", ".join(extra) + "."]
    out += [
        "¹ PyTorch has no CPU device scope; `torch.device` as a context manager sets the default device. "
        "² PyTorch has no timer scope; the cheapest honest one: two `time.perf_counter_ns()` and a per-name total. "
        "³ `Instant::now()` + `elapsed()`: the two clock reads any timer needs. "
        "⁴ `tests/data/bn_dropout.pt` (5 modules) loaded with `tch::CModule::load` / `torch.jit.load`; "
        "tch-scope saves and restores each module's own flag. "
        "⁵ Not a restore: tch cannot read a module's mode. "
        "⁶ Python's usual timeout: main thread only, and it cannot interrupt a C++ kernel; "
        "`deadline` refuses the next libtorch operator on any thread.",
        "",
    ]
    op = deadline_op()
    if op:
        out += [op, ""]
    frows, fmet, fmissed = floor_table()
    if len(frows) > 2:
        out += ["Floors, each a ratio of two numbers from this run:", ""] + frows + [
            "",
            "⁷ scripts/bench/deep_model.py: a TorchScript Sequential of 333 blocks (Linear + ReLU), "
            "1000 modules, in training mode; Python: `torch.no_grad()` + the eval helper. "
            "⁸ examples/benches/peers.rs, group `metrics`: `scoped!(timed => …)` built without the "
            "feature, and with it (`cargo bench -p examples --features peers --bench peers -- metrics/`) "
            "before and after installing `metrics-exporter-prometheus`'s recorder; the recorder's own "
            "floor is one `Histogram::record` on a handle it made.",
            "",
        ]
        met += fmet
        missed += fmissed
    arows = against_table()
    if arows:
        out += arows + [""]
    mrows, mhead = mlp_table()
    if mrows:
        out += [mhead, ""] + mrows + [""]
    ct = compile_table()
    if ct[0]:
        rows, head, r = ct
        out += [head, ""] + rows + [""]
        (met if r <= 1.3 else missed).append(f"compile ≤ 1.3× ({r:.2f}×)")
    out += ["Targets met: " + ("; ".join(met) or "—") + ".",
            "", "Targets missed: " + ("; ".join(missed) or "none") + "."]
    text = "\n".join(out)
    peers = "\n".join(peers_section())
    print(text + "\n\n" + peers)
    if DOC:
        write_block(BEGIN, END, text)
        write_block(PEERS_BEGIN, PEERS_END, peers)


def write_block(begin, end, text):
    """Puts text between the markers begin and end of DOC: in place where
    they are, else the results first (making DOC if need be) and the peers
    right after the results."""
    block = f"{begin}\n{text}\n{end}"
    try:
        old = DOC.read_text()
    except OSError:
        old = ""
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        new = head + block + rest.split(end, 1)[1]
    elif begin != BEGIN and END in old:
        head, rest = old.split(END, 1)
        new = head + END + "\n\n" + block + rest
    else:
        new = ("# Benchmarks\n\nWritten by `make bench` (scripts/bench/run.sh).\n\n"
               + block + "\n" + old)
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(new)


if __name__ == "__main__":
    main()
