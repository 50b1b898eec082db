"""The training-memory benchmark of runtime/benches/recompute.rs in PyTorch
Python: the same MLP (32 x Linear(1024) + ReLU + dropout 0.1, batch 256),
plain and with torch.utils.checkpoint(use_reentrant=False) every 4 layers.

Bytes come from torch.profiler.profile(profile_memory=True)'s `[memory]`
events, the same allocator reports the Rust side's `tensor_memory` reads:
`retained` is what the forward leaves allocated (the activations saved for
backward, and the loss), `step_peak` the peak of the live bytes over the
whole step (weight gradients included). Times are the fastest of the steps,
without the profiler. Prints one JSON line per variant; argv[1] (optional)
is a file to append them to. Sizes as the Rust side: RECOMPUTE_LAYERS,
RECOMPUTE_WIDTH, RECOMPUTE_BATCH, RECOMPUTE_EVERY, RECOMPUTE_STEPS.
"""

import json
import os
import sys
import time

import torch
from torch.utils.checkpoint import checkpoint


def env(name, default):
    return int(os.environ.get(name, default))


L = env("RECOMPUTE_LAYERS", 32)
W = env("RECOMPUTE_WIDTH", 1024)
B = env("RECOMPUTE_BATCH", 256)
EVERY = env("RECOMPUTE_EVERY", 4)
STEPS = env("RECOMPUTE_STEPS", 3)


def layers(x, ps):
    for w, b in ps:
        x = torch.nn.functional.dropout(torch.relu(torch.nn.functional.linear(x, w, b)), 0.1, True)
    return x


def forward(x, ps, every):
    if every == 0:
        return layers(x, ps)
    for i in range(0, len(ps), every):
        x = checkpoint(layers, x, ps[i:i + every], use_reentrant=False)
    return x


def zero_grads(ps):
    """As the Rust side: gradients kept and zeroed, so a step allocates no
    weight gradients (its peak is activations, not parameters)."""
    for w, b in ps:
        for t in (w, b):
            if t.grad is not None:
                t.grad.zero_()


def step(x, ps, every):
    zero_grads(ps)
    torch.manual_seed(7)
    loss = forward(x, ps, every).square().mean()
    loss.backward()


def profiled(f):
    """The `[memory]` events of f(), in order: (their sum, the peak of the running sum)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as prof:
        f()
    events = sorted(((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                     if e.name() == "[memory]"), key=lambda t: t[0])
    live = peak = 0
    for _, n in events:
        live += n
        peak = max(peak, live)
    return live, peak


def memory(x, ps, every):
    """(retained after forward, peak over the step), in bytes."""
    zero_grads(ps)
    torch.manual_seed(7)
    held = {}

    def fwd():
        held["loss"] = forward(x, ps, every).square().mean()

    def bwd():
        held.pop("loss").backward()

    retained, fwd_peak = profiled(fwd)
    _, bwd_peak = profiled(bwd)
    return retained, max(fwd_peak, retained + bwd_peak)


def main():
    torch.manual_seed(0)
    ps = [((torch.randn(W, W) / W ** 0.5).requires_grad_(), torch.zeros(W).requires_grad_())
          for _ in range(L)]
    x = torch.randn(B, W)
    best = {}
    grads = {}
    for every in (0, EVERY):  # warm-up: first calls allocate and dispatch
        step(x, ps, every)
    for _ in range(STEPS):
        for every in (0, EVERY):
            t = time.perf_counter_ns()
            step(x, ps, every)
            ns = time.perf_counter_ns() - t
            best[every] = min(best.get(every, ns), ns)
            grads[every] = [t.grad.clone() for p in ps for t in p]
    bitwise = all(torch.equal(a, b) for a, b in zip(grads[0], grads[EVERY]))

    class MulConstant(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, c):
            ctx.c = c
            return x * c

        @staticmethod
        def backward(ctx, g):
            return g * ctx.c, None

    y = torch.randn(1000, requires_grad=True)

    def per_call(f, n=20000):
        out = []
        for _ in range(5):
            t = time.perf_counter_ns()
            for _ in range(n):
                f()
            out.append((time.perf_counter_ns() - t) / n)
        return min(out)

    apply_ns = per_call(lambda: MulConstant.apply(y, 2.5))
    mul_ns = per_call(lambda: y * 2.5)
    lines = []
    for variant, every in (("plain", 0), ("recompute", EVERY)):
        retained, peak = memory(x, ps, every)
        lines.append(json.dumps({
            "lang": "python", "variant": variant, "layers": L, "width": W, "batch": B,
            "every": EVERY, "retained": retained, "step_peak": peak,
            "step_ms": round(best[every] / 1e6, 1), "bitwise": bitwise,
            "apply_ns": round(apply_ns), "mul_ns": round(mul_ns)}))
    for line in lines:
        print(line)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "a") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
