"""Batch-invariant reference kernels, the mode switch, and mutant kernels.

Importing this package is light: torch and triton are imported only when a
kernel runs or ``enable()`` is entered.

- ``enable()``: route aten matmul / log-softmax / mean / RMSNorm ops to the
  reference kernels (context manager and decorator), see ``mode``.
- ``register_builtins()``: put the stock, reference and mutant implementations
  of every built-in family in the registry the shipped suites iterate over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["enable", "is_enabled", "register_builtins", "register_builtin_rowops"]


def enable(fn: Callable | None = None) -> Any:
    """Route aten ops to the reference kernels while active (see ``mode.enable``)."""
    from .mode import enable as _enable

    return _enable(fn)


def is_enabled() -> bool:
    """Whether the mode switch is on."""
    from .mode import is_enabled as _is_enabled

    return _is_enabled()


def _stock_rmsnorm(x: Any, weight: Any, eps: float | None = None) -> Any:
    import torch.nn.functional as F

    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _stock_log_softmax(x: Any) -> Any:
    import torch

    return torch.log_softmax(x, dim=-1)


def _stock_mean(x: Any) -> Any:
    return x.mean(dim=-1)


def register_builtin_rowops() -> None:
    """Register ``rmsnorm``, ``softmax`` (log-softmax) and ``mean`` implementations.

    The reference on CPU is the pairwise-halving torch path; when triton was
    imported for its interpreter (``TRITON_INTERPRET=1``) the Triton kernels
    are registered too, as ``reference-triton`` on CPU.
    """
    import os

    from . import rowops
    from .mutants.rmsnorm_split import register_rmsnorm_split
    from .mutants.rowsplit import register_rowsplit
    from .registry import register

    register("rmsnorm", "torch", _stock_rmsnorm, role="stock", description="F.rms_norm")
    register("softmax", "torch", _stock_log_softmax, role="stock", description="torch.log_softmax(x, -1)")
    register("mean", "torch", _stock_mean, role="stock", description="x.mean(-1)")
    desc = "Triton one program per row on CUDA; pairwise-halving torch sum on CPU"
    register("rmsnorm", "reference", rowops.rmsnorm, role="reference", description=desc)
    register("softmax", "reference", rowops.log_softmax_last, role="reference", description=desc)
    register("mean", "reference", rowops.mean_last, role="reference", description=desc)
    if os.environ.get("TRITON_INTERPRET") == "1":
        interp = "Triton row kernels under the Triton interpreter (CPU, tiny shapes)"
        register(
            "rmsnorm",
            "reference-triton",
            lambda x, w, eps=None: rowops.rms_norm(x, w, eps, backend="interpret"),
            role="reference",
            devices=("cpu",),
            description=interp,
        )
        register(
            "softmax",
            "reference-triton",
            lambda x: rowops.log_softmax(x, -1, backend="interpret"),
            role="reference",
            devices=("cpu",),
            description=interp,
        )
        register(
            "mean",
            "reference-triton",
            lambda x: rowops.mean(x, -1, backend="interpret"),
            role="reference",
            devices=("cpu",),
            description=interp,
        )
    register_rmsnorm_split()
    register_rowsplit()


def register_builtins() -> None:
    """Register every built-in implementation: row ops, GEMM and FP8, attention, MoE."""
    from .attention import register_builtin_attention
    from .matmul import register_builtin_gemm
    from .moe import register_builtin_moe

    register_builtin_rowops()
    register_builtin_gemm()
    register_builtin_attention()
    register_builtin_moe()
