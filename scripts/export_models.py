"""Exports the small TorchScript models the train/eval tests load, with
PyTorch's own outputs as the expected values.

Run with the bootstrap's venv python (torch 2.13):
    ~/.cache/tch-scope/venv-torch-2.13.0/bin/python scripts/export_models.py

Writes into tests/data/ (a few KB):
  bn_dropout.pt    Linear -> BatchNorm1d -> ReLU -> Dropout -> Linear,
                   saved in TRAINING mode; `running_mean()` returns the
                   BatchNorm's running mean
  mixed_modes.pt   the same layout, saved with its submodules in mixed modes
                   (root training, bn eval, dropout eval, head training)
  bn_dropout.json  a fixed input, PyTorch's eval-mode output for it, the
                   running stats after load, and each model's per-module
                   modes in modules() order
  serve_mlp.pt     the model the serving tests serve (tests/serve.rs): one float
                   tensor [n, 32] in, one [n, 8] out; Linear 32->256 ->
                   BatchNorm1d -> ReLU -> Dropout -> Linear 256->256 ->
                   BatchNorm1d -> ReLU -> Dropout -> Linear 256->8, saved in
                   TRAINING mode (served in eval: BatchNorm's running stats,
                   dropout off)
  tensor_memory_mlp.pt  Linear 64->128 -> ReLU -> Linear 128->128 -> GELU
                   -> Linear 128->10 -> softmax, in eval mode
  tensor_memory.json    for one forward of it under no_grad on a float
                   input of `input_shape` (values don't change the sizes),
                   after `warmup` forwards: what
                   torch.profiler.profile(profile_memory=True) saw on the
                   CPU: the bytes of the positive `[memory]` events summed
                   (`allocated`), of the negative ones (`freed`), and the
                   highest running sum (`peak`)
(`python scripts/export_models.py tensor_memory` writes only the last two.)

`python scripts/export_models.py load_mlp DIR` writes, into DIR instead
(16 MiB: not kept in the repository; `make load` exports it once):
  load_mlp.pt      the memory-bound MLP of the batching benchmark:
                   4 x (Linear 1024->1024, ReLU), then Linear 1024->16,
                   in eval mode; one float tensor [n, 1024] in, [n, 16] out
  load_mlp.json    PyTorch's reference rows for it: `inputs`, 256 rows of
                   1024 floats uniform in [-2, 2), and `outputs`, the eval
                   model's output for each row computed alone under
                   no_grad (what `load --reference` holds a server to)
"""

import json
import pathlib
import sys

import torch
from torch import nn

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)
        self.bn = nn.BatchNorm1d(6)
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        return self.head(self.drop(torch.relu(self.bn(self.fc(x)))))

    @torch.jit.export
    def running_mean(self):
        """BatchNorm's running mean, so tests can see whether it moved."""
        return self.bn.running_mean.clone()


class ServeMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(32, 256),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(256, 256),
            nn.BatchNorm1d(256),
            nn.ReLU(),
            nn.Dropout(0.2),
        )
        self.head = nn.Linear(256, 8)

    def forward(self, x):
        return self.head(self.body(x))


def export_serve_model():
    torch.manual_seed(1)
    net = ServeMlp()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    net.train()
    torch.jit.script(net).save(str(OUT / "serve_mlp.pt"))


class TensorMemoryMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 128)
        self.b = nn.Linear(128, 128)
        self.c = nn.Linear(128, 10)

    def forward(self, x):
        h = torch.relu(self.a(x))
        h = nn.functional.gelu(self.b(h))
        return torch.softmax(self.c(h), dim=-1)


TENSOR_MEMORY_WARMUP = 3


class LoadMlp(nn.Module):
    """Memory-bound at small batches: 16 MiB of weights read per forward."""

    def __init__(self):
        super().__init__()
        layers = []
        for _ in range(4):
            layers += [nn.Linear(1024, 1024), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(1024, 16)

    def forward(self, x):
        return self.head(self.body(x))


LOAD_ROWS = 256


def export_load_mlp(out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(3)
    net = LoadMlp().eval()
    torch.jit.script(net).save(str(out / "load_mlp.pt"))
    g = torch.Generator().manual_seed(4)
    x = torch.rand(LOAD_ROWS, 1024, generator=g) * 4 - 2
    with torch.no_grad():
        y = torch.cat([net(x[i : i + 1]) for i in range(LOAD_ROWS)])
    data = {"features": 1024, "inputs": x.tolist(), "outputs": y.tolist()}
    (out / "load_mlp.json").write_text(json.dumps(data))


def export_tensor_memory():
    torch.manual_seed(2)
    path = OUT / "tensor_memory_mlp.pt"
    torch.jit.script(TensorMemoryMlp().eval()).save(str(path))
    model = torch.jit.load(str(path))
    model.eval()
    shape = [32, 64]
    x = torch.ones(shape)
    with torch.no_grad():
        # The TorchScript executor profiles and optimizes the first runs.
        for _ in range(TENSOR_MEMORY_WARMUP):
            model(x)
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
        ) as prof:
            y = model(x)
    sizes = [
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]"
    ]
    sizes.sort(key=lambda t: t[0])
    live = peak = 0
    for _, n in sizes:
        live += n
        peak = max(peak, live)
    allocated = sum(n for _, n in sizes if n > 0)
    freed = -sum(n for _, n in sizes if n < 0)
    assert live == allocated - freed and allocated > 0, sizes
    del y
    data = {
        "input_shape": shape,
        "warmup": [TENSOR_MEMORY_WARMUP],
        "allocated": [allocated],
        "freed": [freed],
        "peak": [peak],
        "events": [len(sizes)],
    }
    lines = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in data.items())
    (OUT / "tensor_memory.json").write_text("{\n" + lines + "\n}\n")


def modes(module):
    # TorchScript's modules() order: the module itself, then submodules
    # depth-first, as Module::modules() in C++ iterates them.
    return [m.training for m in module.modules()]


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    net = Net()
    # Non-trivial running stats, so eval vs train visibly differ.
    with torch.no_grad():
        net.bn.running_mean.copy_(torch.linspace(-0.5, 0.5, 6))
        net.bn.running_var.copy_(torch.linspace(0.5, 2.0, 6))
    net.train()
    scripted = torch.jit.script(net)
    scripted.save(str(OUT / "bn_dropout.pt"))

    mixed = torch.jit.script(net)
    mixed.train()
    mixed.bn.eval()
    mixed.drop.eval()
    mixed.save(str(OUT / "mixed_modes.pt"))

    x = torch.randn(5, 4)
    loaded = torch.jit.load(str(OUT / "bn_dropout.pt"))
    assert loaded.training
    mixed_loaded = torch.jit.load(str(OUT / "mixed_modes.pt"))
    was = loaded.training
    loaded.eval()
    with torch.no_grad():
        expected = loaded(x)
    loaded.train(was)

    data = {
        "input_shape": list(x.shape),
        "input": x.flatten().tolist(),
        "eval_output_shape": list(expected.shape),
        "eval_output": expected.flatten().tolist(),
        "running_mean": net.bn.running_mean.tolist(),
        "running_var": net.bn.running_var.tolist(),
        "bn_dropout_modes": modes(loaded),
        "mixed_modes": modes(mixed_loaded),
    }
    # One key per line, so the Rust tests' tiny reader needs no JSON crate.
    lines = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in data.items())
    (OUT / "bn_dropout.json").write_text("{\n" + lines + "\n}\n")
    export_tensor_memory()  # reseeds
    export_serve_model()  # last: it reseeds
    print("wrote", *(p.name for p in sorted(OUT.iterdir())))


if __name__ == "__main__":
    if sys.argv[1:2] == ["load_mlp"] and len(sys.argv) == 3:
        export_load_mlp(sys.argv[2])
    elif sys.argv[1:] == ["tensor_memory"]:
        OUT.mkdir(parents=True, exist_ok=True)
        export_tensor_memory()
    else:
        main()
