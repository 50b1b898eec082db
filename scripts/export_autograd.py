"""Expected values for tests/autograd.rs: custom autograd functions written
with torch.autograd.Function, and torch.autograd.gradcheck's verdicts, on
fixed double inputs.

Run with the bootstrap's venv python (torch 2.13):
    $(readlink -f .libtorch)/../../../../bin/python scripts/export_autograd.py

Writes tests/data/autograd.json (a few KB). Each case has its inputs (flat
values + shape), the upstream weights `w` (the loss is sum(output * w)),
the outputs and the gradients of the inputs (null: no gradient). The Rust
tests write the same functions with tch_scope::autograd::Function and
compare.
"""

import json
import os

import torch

torch.set_default_dtype(torch.float64)
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "data", "autograd.json")


def t(values, shape):
    return torch.tensor(values, dtype=torch.float64).reshape(shape)


def flat(x):
    return None if x is None else [float(v) for v in x.detach().reshape(-1).tolist()]


X23 = [-1.5, 0.25, 2.0, -0.75, 3.5, -2.25]
W23 = [0.5, -1.0, 2.0, 1.5, -0.25, 0.75]


class Relu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x > 0).to(g.dtype)


class MulConstant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, c):
        ctx.c = c
        return x * c

    @staticmethod
    def backward(ctx, g):
        return g * ctx.c, None


class MulConstantWrong(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, c):
        ctx.c = c
        return x * c

    @staticmethod
    def backward(ctx, g):
        return g * 2.0, None


class MulAdd(torch.autograd.Function):
    """a * b + b, where only `a` needs a gradient."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b + b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = g * b if ctx.needs_input_grad[0] else None
        gb = g * (a + 1) if ctx.needs_input_grad[1] else None
        return ga, gb


class Sort(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        values, indices = x.sort(dim=-1)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        return values, indices

    @staticmethod
    def backward(ctx, g_values, g_indices):
        (indices,) = ctx.saved_tensors
        return torch.zeros_like(g_values).scatter(-1, indices, g_values)


class MulInplace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(3.0)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 3.0


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x * x


def case_relu():
    x = t(X23, [2, 3]).requires_grad_()
    w = t(W23, [2, 3])
    y = Relu.apply(x)
    (y * w).sum().backward()
    return {"x": X23, "shape": [2, 3], "w": W23, "y": flat(y), "grad_x": flat(x.grad)}


def case_mul_constant():
    xs = [1.0, -2.0, 0.5, 4.0]
    ws = [0.25, 1.0, -3.0, 2.0]
    x = t(xs, [4]).requires_grad_()
    y = MulConstant.apply(x, 2.5)
    (y * t(ws, [4])).sum().backward()
    return {"x": xs, "shape": [4], "w": ws, "c": 2.5, "y": flat(y), "grad_x": flat(x.grad)}


def case_two_inputs():
    as_ = [1.0, 2.0, -3.0]
    bs = [0.5, -1.5, 2.0]
    ws = [1.0, -2.0, 0.25]
    a = t(as_, [3]).requires_grad_()
    b = t(bs, [3])
    y = MulAdd.apply(a, b)
    (y * t(ws, [3])).sum().backward()
    return {
        "a": as_,
        "b": bs,
        "shape": [3],
        "w": ws,
        "y": flat(y),
        "grad_a": flat(a.grad),
        "grad_b": flat(b.grad),
        "b_requires_grad": y.requires_grad and b.requires_grad,
    }


def case_sort():
    xs = [3.0, -1.0, 2.0, 0.5, 5.0, -4.0, 1.0, 0.0]
    ws = [1.0, 2.0, 3.0, 4.0, -1.0, -2.0, -3.0, -4.0]
    x = t(xs, [2, 4]).requires_grad_()
    values, indices = Sort.apply(x)
    (values * t(ws, [2, 4])).sum().backward()
    return {
        "x": xs,
        "shape": [2, 4],
        "w": ws,
        "values": flat(values),
        "indices": [int(i) for i in indices.reshape(-1).tolist()],
        "indices_requires_grad": indices.requires_grad,
        "grad_x": flat(x.grad),
    }


def case_mark_dirty():
    xs = [1.0, -2.0, 3.0]
    ws = [0.5, 0.25, -1.0]
    x = t(xs, [3]).requires_grad_()
    x1 = x * 1.0
    y = MulInplace.apply(x1)
    same = y.data_ptr() == x1.data_ptr()
    (y * t(ws, [3])).sum().backward()
    return {"x": xs, "shape": [3], "w": ws, "y": flat(y), "same_storage": same, "grad_x": flat(x.grad)}


def case_double_backward():
    xs = [0.5, -1.25, 2.0]
    x = t(xs, [3]).requires_grad_()
    y = Cube.apply(x)
    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    first = flat(g)
    g.sum().backward()
    return {"x": xs, "shape": [3], "y": flat(y), "first": first, "second": flat(x.grad)}


def case_gradcheck():
    x = t([0.3, -1.2, 2.5, 0.7], [4]).requires_grad_()
    a = t([0.4, -0.9, 1.3], [3]).requires_grad_()
    b = t([1.1, 0.2, -0.6], [3])
    kw = dict(eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=False)
    return {
        "x": flat(x),
        "a": flat(a),
        "b": flat(b),
        "mul_constant": torch.autograd.gradcheck(lambda x: MulConstant.apply(x, 2.5), (x,), **kw),
        "mul_constant_wrong": torch.autograd.gradcheck(lambda x: MulConstantWrong.apply(x, 2.5), (x,), **kw),
        "cube": torch.autograd.gradcheck(Cube.apply, (x,), **kw),
        "mul_add": torch.autograd.gradcheck(MulAdd.apply, (a, b), **kw),
    }


def main():
    data = {
        "torch": torch.__version__,
        "relu": case_relu(),
        "mul_constant": case_mul_constant(),
        "two_inputs": case_two_inputs(),
        "sort": case_sort(),
        "mark_dirty": case_mark_dirty(),
        "double_backward": case_double_backward(),
        "gradcheck": case_gradcheck(),
    }
    with open(OUT, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    print("wrote", os.path.normpath(OUT))


if __name__ == "__main__":
    main()
