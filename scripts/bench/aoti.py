"""The models of the AOTInductor benchmark (scripts/bench/aoti.sh) and
Python's own runner on them.

    <venv>/bin/python scripts/bench/aoti.py export DIR
    <venv>/bin/python scripts/bench/aoti.py python DIR   # JSON lines on stdout

`export` writes into DIR (a C++ compiler; about 30 s a package on 2 cores):

  mlp.pt, mlp_b1.pt2, mlp_b32.pt2
                     the MLP the serving tests serve (tests/data/serve_mlp.pt,
                     [n, 32] -> [n, 8]): the TorchScript file as it is, and
                     packages of it (scripts/export_pt2.py's serve_mlp())
  conv.pt, conv_b1.pt2, conv_b32.pt2
                     a small conv net, [n, 3, 32, 32] -> [n, 10]: Conv 3->16
                     3x3 -> ReLU -> MaxPool 2 -> Conv 16->32 3x3 -> ReLU ->
                     global average pool -> Linear 32->10, in eval mode, as
                     TorchScript (torch.jit.script) and as packages
A package per batch size (1 and 32), each exported for its shape: with a
dynamic batch dimension this conv net's package refuses a batch of 1
(torch.export specializes sizes 0 and 1 away: "expected it to be >= 2").

`python` times `torch._inductor.aoti_load_package(path)(x)` on each package
at batch 1 and 32, on one thread, under inference_mode: one JSON line per
case, as examples/benches/aoti.rs prints its own.
"""

import json
import pathlib
import shutil
import sys
import time

import torch
from torch import nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import export_pt2  # noqa: E402

SHAPES = {"mlp": [32], "conv": [3, 32, 32]}
BATCHES = [1, 32]


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.c1(x)), 2)
        x = torch.relu(self.c2(x))
        return self.fc(x.mean(dim=(2, 3)))


def export(out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(export_pt2.SERVE_MLP, out / "mlp.pt")
    torch.manual_seed(6)
    conv = Conv().eval()
    torch.jit.script(conv).save(str(out / "conv.pt"))
    for b in BATCHES:
        torch.manual_seed(5)
        export_pt2.export(f"mlp_b{b}", export_pt2.serve_mlp(), torch.randn(b, 32), out)
        export_pt2.export(f"conv_b{b}", conv, torch.randn(b, 3, 32, 32), out)
    print("wrote", *(p.name for p in sorted(out.iterdir())), file=sys.stderr)


def timed(f, budget=1.0, warmup=20):
    for _ in range(warmup):
        f()
    # Batches of calls until the budget is spent; the median of the per-call
    # means of each batch.
    per = []
    n = 1
    start = time.perf_counter()
    while time.perf_counter() - start < budget:
        t = time.perf_counter()
        for _ in range(n):
            f()
        dt = (time.perf_counter() - t) / n
        per.append(dt)
        if dt * n < 0.01:
            n *= 2
    per.sort()
    return per[len(per) // 2], sum(per) / len(per)


def python(d):
    d = pathlib.Path(d)
    torch.set_num_threads(1)
    for model in ("mlp", "conv"):
        for b in BATCHES:
            runner = torch._inductor.aoti_load_package(str(d / f"{model}_b{b}.pt2"))
            x = torch.randn(b, *SHAPES[model])
            with torch.inference_mode():
                median, mean = timed(lambda: runner(x))
            print(json.dumps({
                "model": model, "format": "pt2", "runner": "python aoti_load_package",
                "batch": b, "median_us": median * 1e6, "mean_us": mean * 1e6,
            }))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("export", "python"):
        sys.exit(__doc__)
    {"export": export, "python": python}[sys.argv[1]](sys.argv[2])
