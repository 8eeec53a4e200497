"""Planted mutants: one module of a model swapped for a deliberately batch-variant kernel.

These are the designed positive controls of localization: a planted module must be named as the
culprit, and nothing upstream of it. They never depend on the host's BLAS being variant or not.

- ``splitk-matmul``: an ``nn.Linear`` computed by ``mutants.splitk_matmul`` (split count from M);
- ``rmsnorm-split``: an RMSNorm (``nn.RMSNorm`` or any module with ``weight`` and an epsilon,
  as Hugging Face's ``LlamaRMSNorm``) computed by ``mutants.rmsnorm_split`` (split from M).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

PLANTS = ("splitk-matmul", "rmsnorm-split")


class SplitKLinear(nn.Module):
    """``nn.Linear`` through the split-K mutant (rows flattened to M = tokens of the batch)."""

    def __init__(self, linear: nn.Module) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = getattr(linear, "bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from pytest_invariance.reference_kernels.mutants.splitk_matmul import splitk_matmul

        y = splitk_matmul(x.reshape(-1, x.shape[-1]), self.weight).reshape(*x.shape[:-1], -1)
        return y if self.bias is None else y + self.bias


class SplitRMSNorm(nn.Module):
    """RMSNorm through the split-reduction mutant (rows flattened to M = tokens of the batch)."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.weight = norm.weight
        self.eps = next((getattr(norm, a) for a in ("eps", "variance_epsilon") if getattr(norm, a, None) is not None), None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from pytest_invariance.reference_kernels.mutants.rmsnorm_split import split_rmsnorm

        return split_rmsnorm(x.reshape(-1, x.shape[-1]), self.weight, self.eps).reshape(x.shape)


def plant(model: nn.Module, path: str, kind: str = "splitk-matmul") -> nn.Module:
    """A deep copy of ``model`` whose submodule ``path`` is replaced by the ``kind`` mutant."""
    if kind not in PLANTS:
        raise ValueError(f"unknown plant {kind!r}; expected one of {', '.join(PLANTS)}")
    try:
        target = model.get_submodule(path)
    except AttributeError:
        raise ValueError(f"model has no submodule {path!r}") from None
    if getattr(target, "weight", None) is None:
        raise ValueError(f"{path} ({type(target).__name__}) has no weight to plant {kind} on")
    out = copy.deepcopy(model)
    parent_path, _, name = path.rpartition(".")
    parent = out.get_submodule(parent_path) if parent_path else out
    new = SplitKLinear(out.get_submodule(path)) if kind == "splitk-matmul" else SplitRMSNorm(out.get_submodule(path))
    setattr(parent, name, new)
    return out


def first_linear(model: nn.Module) -> str | None:
    """Path of the first ``nn.Linear`` in registration order (the default plant site)."""
    return next((p for p, m in model.named_modules() if isinstance(m, nn.Linear)), None)


def linear_paths(model: Any) -> list[str]:
    return [p for p, m in model.named_modules() if isinstance(m, nn.Linear)] if isinstance(model, nn.Module) else []
