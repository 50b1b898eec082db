"""Exports two models with the PyTorch this python runs (the newest on PyPI,
for `make test-newest-pytorch`), each as an AOTInductor `.pt2` and as a
TorchScript file, with their inputs and PyTorch's own outputs, for
examples/newest_pytorch.rs to check against tch-scope on libtorch 2.13.

    <venv>/bin/python scripts/export_newest.py OUT_DIR

Writes into OUT_DIR (through a temporary folder renamed into place):

  serve_mlp.pt2  tests/data/serve_mlp.pt's weights as an eager module
                 (scripts/export_pt2.py's `serve_mlp`: Linear, BatchNorm1d,
                 ReLU, Dropout, in eval mode), float32 [n, 32], n from 1 to
                 4096, exported with scripts/export_pt2.py's dynamic-batch
                 recipe (`backed_size_oblivious` around export and compile)
  serve_mlp.pt   the same module through `torch.jit.script`
  rows.pt2       scripts/export_pt2.py's `Rows`: x float32 [n, 16] and ids
                 int64 [n, 5] sharing one dynamic batch, same recipe
  rows.pt        the same module through `torch.jit.trace`
  cases.json     for each model and a batch of 1, 5 and 64: the inputs
                 (float32 as bit patterns, int64 as integers), and the
                 outputs of the eager module, of PyTorch's own AOTI runner
                 (`torch._inductor.aoti_load_package`) on the `.pt2`, and of
                 the TorchScript file loaded back with `torch.jit.load`;
                 every float32 as its bit pattern, so comparisons are exact

Needs a C++ compiler (AOTInductor compiles the package's code): about a
minute a model on 2 cores.
"""

import json
import os
import pathlib
import platform
import shutil
import sys
import tempfile
import warnings

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from export_pt2 import Rows, bits, dynamic_batch_export, serve_mlp  # noqa: E402

BATCHES = (1, 5, 64)


def tensor_record(t):
    if t.dtype == torch.float32:
        return {"dtype": "float32", "shape": list(t.shape), "bits": bits(t)}
    if t.dtype == torch.int64:
        return {"dtype": "int64", "shape": list(t.shape), "ints": t.flatten().tolist()}
    raise SystemExit(f"no record for {t.dtype}")


def first(out):
    return out[0] if isinstance(out, (list, tuple)) else out


def inputs_for(name, n):
    if name == "serve_mlp":
        return (torch.randn(n, 32),)
    return (torch.randn(n, 16), torch.randint(0, 10, (n, 5)))


def export_model(name, model, out):
    model.eval()
    torch.manual_seed(7)
    example = inputs_for(name, 3)
    pt2 = out / f"{name}.pt2"
    ts = out / f"{name}.pt"
    with torch.no_grad():
        dynamic_batch_export(model, example, str(pt2))
        with warnings.catch_warnings():
            # torch.jit is deprecated from 2.15 (a FutureWarning): still
            # what a TorchScript user runs, and what this checks.
            warnings.simplefilter("ignore", FutureWarning)
            scripted = torch.jit.script(model) if name == "serve_mlp" else torch.jit.trace(model, example)
            scripted.save(str(ts))
            reloaded = torch.jit.load(str(ts))
        runner = torch._inductor.aoti_load_package(str(pt2))
        cases = []
        for n in BATCHES:
            args = inputs_for(name, n)
            eager = model(*args)
            cases.append(
                {
                    "batch": n,
                    "inputs": [tensor_record(a) for a in args],
                    "output_shape": list(eager.shape),
                    "eager_bits": bits(eager),
                    "runner_bits": bits(first(runner(*args))),
                    "torchscript_bits": bits(first(reloaded(*args))),
                }
            )
    return {"name": name, "cases": cases}


def main(out):
    # The packages' own input check on while PyTorch runs them here.
    os.environ["AOTI_RUNTIME_CHECK_INPUTS"] = "1"
    out = pathlib.Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        models = [
            export_model("serve_mlp", serve_mlp(), tmp),
            export_model("rows", Rows(), tmp),
        ]
        data = {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "models": models,
        }
        (tmp / "cases.json").write_text(json.dumps(data) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.rename(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    print("torch", torch.__version__, "wrote", *(p.name for p in sorted(out.iterdir())))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    torch.manual_seed(0)
    main(sys.argv[1])
