"""PyTorch Python side of runtime/benches/mlp.rs: the same deep MLP
forward with grad tracking, under torch.no_grad() and under
torch.inference_mode(). One variant per process (argv[1]); prints one JSON
line. Sizes from MLP_LAYERS / MLP_WIDTH / MLP_BATCH / MLP_ITERS. Its
activation memory comes from one more forward under
torch.profiler.profile(profile_memory=True): the peak of the live bytes its
`[memory]` events add up to, and their positive sizes summed (what the
Rust side's `tensor_memory` reports).
"""

import contextlib
import json
import os
import sys
import time

import torch
from torch import nn


def rss_kib():
    """VmRSS and VmHWM of this process, in KiB."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.split()[0] if value.split() else "0"
    return int(fields.get("VmRSS", 0)), int(fields.get("VmHWM", 0))


def activation_bytes(model, x, scope):
    """(peak live bytes, bytes allocated) of one forward, output dropped."""
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        with scope():
            y = model(x)
        del y
    sizes = sorted(
        ((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
         if e.name() == "[memory]"),
        key=lambda t: t[0],  # stable: events of one time stay in order
    )
    live = peak = 0
    for _, n in sizes:
        live += n
        peak = max(peak, live)
    return peak, sum(n for _, n in sizes if n > 0)


def main():
    variant = sys.argv[1]
    layers = int(os.environ.get("MLP_LAYERS", 24))
    width = int(os.environ.get("MLP_WIDTH", 2048))
    batch = int(os.environ.get("MLP_BATCH", 256))
    iters = int(os.environ.get("MLP_ITERS", 5))
    scope = {
        "grad": contextlib.nullcontext,
        "no_grad": torch.no_grad,
        "inference_mode": torch.inference_mode,
    }[variant]

    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*mods)
    x = torch.randn(batch, width)
    rss_before, _ = rss_kib()

    with scope():
        y = model(x)
    del y
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        with scope():
            y = model(x)
        y.sum().item()
        times.append((time.perf_counter() - t) * 1e3)
        del y
    times.sort()
    _, hwm = rss_kib()
    act_peak, act_allocated = activation_bytes(model, x, scope)
    print(
        json.dumps(
            {
                "lang": "python",
                "variant": variant,
                "layers": layers,
                "width": width,
                "batch": batch,
                "iters": iters,
                "threads": torch.get_num_threads(),
                "ms_median": times[len(times) // 2],
                "ms_min": times[0],
                "rss_before_kib": rss_before,
                "hwm_kib": hwm,
                "act_peak_bytes": act_peak,
                "act_allocated_bytes": act_allocated,
            }
        )
    )


if __name__ == "__main__":
    main()
