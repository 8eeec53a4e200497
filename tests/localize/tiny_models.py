"""Small models for the localization tests (no downloads: random weights, built here)."""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(width)
        self.up = nn.Linear(width, 2 * width, bias=False)
        self.down = nn.Linear(2 * width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class Tiny(nn.Module):
    """Linear, then blocks of RMSNorm / Linear / ReLU / Linear with residuals, then a head: every
    reduction is a matmul or an RMSNorm, which ``reference_kernels.enable()`` routes."""

    def __init__(self, width: int = 64, depth: int = 2, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.inp = nn.Linear(width, width, bias=False)
        self.layers = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def rows(n: int, tokens: int = 4, width: int = 64, seed: int = 1) -> torch.Tensor:
    from pytest_invariance.oracles.inputs import wide_spread

    return wide_spread((n, tokens, width), seed)
