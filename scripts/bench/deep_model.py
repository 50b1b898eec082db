"""Exports the 1000-module TorchScript model of the `no_grad, eval(model)`
benchmark to argv[1]: a Sequential of 333 blocks, each a
Linear(2, 2) and a ReLU in a module of its own, so modules() counts
1 + 333 * 3 = 1000. Saved in training mode.

Run with the bootstrap's venv python (torch 2.13).
"""

import pathlib
import sys

import torch
from torch import nn

BLOCKS = 333


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


def main():
    out = pathlib.Path(sys.argv[1])
    torch.manual_seed(0)
    model = torch.jit.script(nn.Sequential(*[Block() for _ in range(BLOCKS)]))
    model.train()
    n = sum(1 for _ in model.modules())
    assert n == 1000, n
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(str(out))


if __name__ == "__main__":
    main()
