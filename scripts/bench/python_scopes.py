"""Enter + leave cost of PyTorch's Python context managers, one per
tch-scope word, for the benchmark table (`make bench`).

Each statement is a full `with` (construct, __enter__, __exit__) with an
empty body, what a user pays per scope. timeit: auto-ranged loop count,
7 repeats, median per call in ns. Writes JSON {word: ns} to argv[1].

Run with the bootstrap's venv python (torch 2.13).
"""

import json
import pathlib
import signal
import sys
import time
import timeit
import warnings

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "data" / "bn_dropout.pt"


class Timer:
    """The cheapest honest Python timer: two perf_counter_ns() reads and a
    per-name total, like `timed` (PyTorch has no timer context manager)."""

    totals = {}

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.start = time.perf_counter_ns()

    def __exit__(self, *exc):
        t = Timer.totals
        t[self.name] = t.get(self.name, 0) + time.perf_counter_ns() - self.start


class EvalMode:
    """`eval(model)`: the usual helper — remember `training`, eval(), then
    train(was). (It restores only the root's flag into every submodule;
    tch-scope restores each submodule's own flag, which costs more.)"""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.was = self.model.training
        self.model.eval()

    def __exit__(self, *exc):
        self.model.train(self.was)


class TrainMode(EvalMode):
    def __enter__(self):
        self.was = self.model.training
        self.model.train()


class Deterministic:
    """`deterministic`: PyTorch has a setter, not a context manager."""

    def __enter__(self):
        self.was = torch.are_deterministic_algorithms_enabled()
        self.warn = torch.is_deterministic_algorithms_warn_only_enabled()
        torch.use_deterministic_algorithms(True)

    def __exit__(self, *exc):
        torch.use_deterministic_algorithms(self.was, warn_only=self.warn)


class Seed:
    """`seed(n)`: fork_rng() + manual_seed(n), CPU generator only (as on
    this machine tch-scope forks only the CPU generator)."""

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        self.fork = torch.random.fork_rng(devices=[])
        self.fork.__enter__()
        torch.manual_seed(self.n)

    def __exit__(self, *exc):
        return self.fork.__exit__(*exc)


class MatmulPrecision:
    """`matmul_precision(p)`: PyTorch has a setter, not a context manager."""

    def __init__(self, p):
        self.p = p

    def __enter__(self):
        self.was = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(self.p)

    def __exit__(self, *exc):
        torch.set_float32_matmul_precision(self.was)


class Tf32:
    """`tf32(flag)`: an attribute of torch.backends.cuda.matmul."""

    def __init__(self, flag):
        self.flag = flag

    def __enter__(self):
        m = torch.backends.cuda.matmul
        self.was = m.allow_tf32
        m.allow_tf32 = self.flag

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32 = self.was


class Alarm:
    """`robust_inference(model, timeout=...)`'s timeout: a SIGALRM handler
    raising TimeoutError, set on entry and cancelled and restored on exit
    (main thread only; it cannot interrupt a C++ kernel)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def _raise(self, *_):
        raise TimeoutError(f"timed out after {self.seconds} s")

    def __enter__(self):
        self.old = signal.signal(signal.SIGALRM, self._raise)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.old)


def main():
    out = pathlib.Path(sys.argv[1])
    warnings.simplefilter("ignore")  # detect_anomaly warns on every entry
    torch.set_num_threads(torch.get_num_threads())
    model = torch.jit.load(str(MODEL))
    # argv[2]: the 1000-module model (deep_model.py), if exported.
    deep_path = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else None
    deep = torch.jit.load(str(deep_path)) if deep_path and deep_path.exists() else None
    env = {
        "deep": deep,
        "torch": torch,
        "model": model,
        "Timer": Timer,
        "EvalMode": EvalMode,
        "TrainMode": TrainMode,
        "Deterministic": Deterministic,
        "Seed": Seed,
        "MatmulPrecision": MatmulPrecision,
        "Tf32": Tf32,
        "SDPBackend": torch.nn.attention.SDPBackend,
        "sdpa_kernel": torch.nn.attention.sdpa_kernel,
        "Alarm": Alarm,
    }
    cases = {
        "no_grad": "torch.no_grad()",
        "enable_grad": "torch.enable_grad()",
        "grad": "torch.set_grad_enabled(False)",
        "inference_mode": "torch.inference_mode()",
        "device": 'torch.device("cpu")',
        "timed": 'Timer("x")',
        "seed": "Seed(7)",
        "fork_rng": "torch.random.fork_rng(devices=[])",
        "autocast": 'torch.autocast("cpu", dtype=torch.bfloat16)',
        "record": 'torch.profiler.record_function("x")',
        "detect_anomaly": "torch.autograd.detect_anomaly()",
        "deterministic": "Deterministic()",
        "eval": "EvalMode(model)",
        "train": "TrainMode(model)",
        "no_grad_eval": "torch.no_grad(), EvalMode(model)",
        "matmul_precision": 'MatmulPrecision("high")',
        "tf32": "Tf32(True)",
        "cudnn": "torch.backends.cudnn.flags(enabled=True, benchmark=True, deterministic=True)",
        "sdpa": "sdpa_kernel([SDPBackend.MATH])",
        "inference_mode_false": "torch.inference_mode(False)",
        "deadline": "Alarm(3600)",
    }
    if deep is not None:
        cases["no_grad_eval_1000"] = "torch.no_grad(), EvalMode(deep)"
    results = {}
    for word, cm in cases.items():
        stmt = f"with {cm}:\n    pass"
        if word == "inference_mode_false":  # inside an outer inference_mode
            stmt = f"with torch.inference_mode():\n  for _ in range(100):\n    with {cm}:\n      pass"
        t = timeit.Timer(stmt, globals=env)
        n, _ = t.autorange()
        n = max(n // 2, 1)  # ~0.1 s per repeat
        runs = sorted(t.repeat(repeat=7, number=n))
        per = 100 if word == "inference_mode_false" else 1
        results[word] = runs[len(runs) // 2] / n / per * 1e9
        print(f"  python {word:<16} {results[word]:10.1f} ns", file=sys.stderr)
    results["_meta"] = {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "threads": torch.get_num_threads(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
