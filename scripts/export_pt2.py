"""Exports the small AOTInductor `.pt2` packages tests/aoti.rs loads, with
PyTorch's own outputs as the expected values.

    <venv>/bin/python scripts/export_pt2.py OUT_DIR

Needs the bootstrap's torch and a C++ compiler (AOTInductor compiles the
generated C++ into a shared library inside the package); about 40-60 s a
model on 2 cores. tests/aoti.rs runs it once per machine into
target/aoti/<torch version>-<hash of this script>/ and reads:

  mlp.pt2     Linear 32->64 -> ReLU -> Linear 64->8, in eval mode, exported
              for one float32 input of shape [4, 32]
  mlp.json    the input, the output of PyTorch's own AOTI runner
              (`torch._inductor.aoti_load_package(path)(x)`) on it, and the
              eager model's output: every float32 as its bit pattern (an
              int32), so the comparison is exact
  wide.pt2    y = relu(x * 2 + 1) * x on a float32 [512, 1024]: one fused
              loop large enough that Inductor parallelises it with OpenMP
              (`#pragma omp parallel num_threads(N)`, N = this machine's
              `torch.get_num_threads()` at export)
  wide.json   its shapes (no values: they are large), and
              `omp_num_threads`: the N written into its kernel (read back
              from the package's C++ source)
  serve_mlp.pt2  the model the serving tests serve (tests/serve.rs)
              (tests/data/serve_mlp.pt: Linear 32->256 -> BatchNorm1d -> ReLU
              -> Dropout -> Linear 256->256 -> BatchNorm1d -> ReLU -> Dropout
              -> Linear 256->8), its weights read from that TorchScript file,
              in eval mode, exported with a dynamic batch: float32 [n, 32]
              for n from 1 to 4096 (tests/serve.rs serves it)
  serve_mlp.json  as mlp.json, for an input of shape [3, 32]
  rows.pt2    y = Linear 16->4 (x - x.mean(1, keepdim=True)) + Embedding(10, 4)(ids).sum(1),
              two inputs sharing a dynamic batch: x float32 [n, 16] and
              ids int64 [n, 5], n from 1 to 4096. Centring the rows is
              what makes Inductor's lowering ask whether n == 1: exported
              with `backed_size_oblivious` around `torch.export.export`
              alone, its input check refuses a batch of 1 ("expected it to
              be >= 2"); around the compile as well, it takes 1
  rows.json   for a batch of 1 and a batch of 5: the inputs (x as bit
              patterns, ids as integers) and the eager model's output
  cuda_key.pt2  mlp.pt2 with its metadata's AOTI_DEVICE_KEY rewritten to
              "cuda": what a CUDA package looks like to a CPU-only loader
              (compiling a real one needs a GPU machine's toolchain)

Every dynamic-batch package is run once, here, on a batch of 1 and on its
example batch with `AOTI_RUNTIME_CHECK_INPUTS=1` (the package's own input
check on): a package that refuses a lone row fails the export, not a
server.

The files are written to a temporary folder beside OUT_DIR and renamed into
place at the end, so a reader sees all of them or none; an OUT_DIR that is
already there with a whole set is kept, and one holding other files gets
the files moved in, `wide.json` (the mark of a whole set) last.
"""

import concurrent.futures
import json
import multiprocessing
import os
import pathlib
import re
import shutil
import sys
import tempfile
import zipfile

import torch
import torch.fx.experimental._config as fx_config
from torch import nn


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 64)
        self.b = nn.Linear(64, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class Wide(nn.Module):
    def forward(self, x):
        return torch.relu(x * 2.0 + 1.0) * x


class Rows(nn.Module):
    """Two inputs with one dynamic batch; centring the rows broadcasts a
    [n, 1] mean against [n, 16], which Inductor's lowering asks about."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 4)
        self.emb = nn.Embedding(10, 4)

    def forward(self, x, ids):
        return self.lin(x - x.mean(1, keepdim=True)) + self.emb(ids).sum(1)


SERVE_MLP = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "serve_mlp.pt"

# The largest batch a dynamic-batch package takes.
MAX_BATCH = 4096


def serve_mlp():
    """tests/data/serve_mlp.pt as an eager module (torch.export takes no
    TorchScript), in eval mode: same layers, its state dict copied."""
    net = nn.Sequential(
        nn.Sequential(
            nn.Linear(32, 256),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(256, 256),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Dropout(0.2),
        ),
        nn.Linear(256, 8),
    )
    state = torch.jit.load(str(SERVE_MLP)).state_dict()
    # ServeMlp's names: body.N.*, head.*
    state = {k.replace("body.", "0.", 1).replace("head.", "1.", 1): v for k, v in state.items()}
    net.load_state_dict(state)
    return net.eval()


def bits(t):
    return t.contiguous().view(torch.int32).flatten().tolist()


def dynamic_batch_export(model, args, path):
    """The recipe for a package whose batch may be 1 (docs/words.md): dim 0
    of every input is one dynamic `batch` from 1 to MAX_BATCH, and
    `backed_size_oblivious` covers the export *and* the compile. Without
    it the export specializes sizes 0 and 1 away; around the export alone,
    Inductor's lowering (which re-reads the sizes) may still ask whether
    the batch is 1 and write `>= 2` into the package's input check."""
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    dynamic = tuple({0: batch} for _ in args)
    with fx_config.patch(backed_size_oblivious=True):
        ep = torch.export.export(model, args, dynamic_shapes=dynamic)
        torch._inductor.aoti_compile_and_package(ep, package_path=path)


def export(name, model, args, out, record=True, dynamic_batch=False):
    model.eval()
    path = str(out / f"{name}.pt2")
    with torch.no_grad():
        if dynamic_batch:
            dynamic_batch_export(model, args, path)
        else:
            ep = torch.export.export(model, args)
            torch._inductor.aoti_compile_and_package(ep, package_path=path)
        runner = torch._inductor.aoti_load_package(path)
        got = runner(*args)
        eager = model(*args)
        if dynamic_batch:
            # The package's own check is on in this process (main sets
            # AOTI_RUNTIME_CHECK_INPUTS): a lone row must pass it.
            one = tuple(a[:1].clone() for a in args)
            alone = runner(*one)
            alone = alone[0] if isinstance(alone, (list, tuple)) else alone
            want = model(*one)
            if not torch.allclose(alone, want, atol=1e-5, rtol=0):
                raise SystemExit(f"{name}.pt2 answers a batch of 1 unlike eager")
    got = got[0] if isinstance(got, (list, tuple)) else got
    x = args[0]
    data = {"torch": torch.__version__, "input_shape": list(x.shape), "output_shape": list(got.shape)}
    if record:
        data["input_bits"] = bits(x)
        data["runner_bits"] = bits(got)
        data["eager_bits"] = bits(eager)
    return path, data


def kernel_threads(path):
    """The N of `#pragma omp parallel num_threads(N)` in the package's C++."""
    found = set()
    with zipfile.ZipFile(path) as z:
        for n in z.namelist():
            if n.endswith(".cpp"):
                src = z.read(n).decode()
                found.update(int(m) for m in re.findall(r"omp parallel num_threads\((\d+)\)", src))
    return sorted(found)


def rewrite_device(src, dst, device):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("_metadata.json"):
                meta = json.loads(data)
                meta["AOTI_DEVICE_KEY"] = device
                data = json.dumps(meta).encode()
            zout.writestr(info, data)


def write_json(path, data):
    # One key per line, as tests/data/*.json.
    lines = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in data.items())
    path.write_text("{\n" + lines + "\n}\n")


def export_one(name, tmp):
    """One package and its json, in a worker process of its own."""
    tmp = pathlib.Path(tmp)
    if name == "mlp":
        torch.manual_seed(0)
        mlp = Mlp()
        x = torch.randn(4, 32)
        path, data = export("mlp", mlp, (x,), tmp)
        write_json(tmp / "mlp.json", data)
        rewrite_device(path, tmp / "cuda_key.pt2", "cuda")
    elif name == "serve_mlp":
        torch.manual_seed(3)
        x = torch.randn(3, 32)
        _, data = export("serve_mlp", serve_mlp(), (x,), tmp, dynamic_batch=True)
        write_json(tmp / "serve_mlp.json", data)
    elif name == "rows":
        torch.manual_seed(4)
        rows = Rows().eval()
        args = (torch.randn(3, 16), torch.randint(0, 10, (3, 5)))
        export("rows", rows, args, tmp, record=False, dynamic_batch=True)
        data = {"torch": torch.__version__}
        for n in (1, 5):
            x, ids = torch.randn(n, 16), torch.randint(0, 10, (n, 5))
            with torch.no_grad():
                y = rows(x, ids)
            data[f"x{n}_bits"] = bits(x)
            data[f"ids{n}"] = ids.flatten().tolist()
            data[f"eager{n}_bits"] = bits(y)
        write_json(tmp / "rows.json", data)
    else:
        torch.manual_seed(1)
        x = torch.randn(512, 1024)
        path, data = export("wide", Wide(), (x,), tmp, record=False)
        data["omp_num_threads"] = kernel_threads(path)
        write_json(tmp / "wide.json", data)


def main(out):
    # The packages' own input check, on in this process and the spawned
    # workers (which inherit the environment): see export().
    os.environ["AOTI_RUNTIME_CHECK_INPUTS"] = "1"
    out = pathlib.Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        # Two at a time: each export is mostly one single-threaded C++
        # compile, so two processes take about half the time on 2 cores.
        # A spawned worker has the machine's default thread count, which
        # `wide` records.
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
            names = ("mlp", "serve_mlp", "rows", "wide")
            jobs = [pool.submit(export_one, n, str(tmp)) for n in names]
            for job in jobs:
                job.result()

        try:
            os.rename(tmp, out)
        except OSError:
            # Another export (a second `cargo test` at once) finished
            # first: keep its files, which readers may be using.
            if not (out / "wide.json").exists():
                if not out.is_dir():
                    raise
                # A folder of other files (`make load` keeps the load MLP's
                # export there too): move ours in one by one, wide.json
                # last, since readers take it as the mark of a whole set.
                for f in sorted(tmp.iterdir(), key=lambda f: f.name == "wide.json"):
                    os.replace(f, out / f.name)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    print("wrote", *(p.name for p in sorted(out.iterdir())))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
