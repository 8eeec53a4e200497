"""A batch-variant *aten-level* op for the tests: the split-K mutant registered as one custom op.

A planted module (``localize.plant``) runs several aten ops whose count changes with M, so it is
found at module granularity; registered as a single op it is one dispatcher call, which both
localization (op granularity) and the census (replayed at its own shapes) must name.
"""

from __future__ import annotations

import torch
from pytest_invariance.reference_kernels.mutants.splitk_matmul import splitk_matmul
from torch import nn


@torch.library.custom_op("invariance_tests::splitk_mm", mutates_args=())
def splitk_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return splitk_matmul(x, w)


@splitk_mm.register_fake
def _(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], w.shape[0])


class SplitKOpLinear(nn.Module):
    """``nn.Linear`` through the one-op split-K mutant."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = linear.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return splitk_mm(x.reshape(-1, x.shape[-1]), self.weight).reshape(*x.shape[:-1], -1)
