"""Batch-invariant reference kernels, the mode switch, and mutant kernels.

Importing this package is light: torch and triton are imported only when a
kernel runs or ``enable()`` is entered.

- ``enable()``: route aten matmul / log-softmax / mean / RMSNorm ops to the
  reference kernels (context manager and decorator), see ``mode``.
- ``register_builtins()``: put the stock, reference and mutant implementations
  of every built-in family in the registry the shipped suites iterate over
  (``catalogue`` lists them; the families and mutants know nothing of the registry).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["enable", "is_enabled", "register_builtins"]


def enable(fn: Callable | None = None) -> Any:
    """Route aten ops to the reference kernels while active (see ``mode.enable``)."""
    from .mode import enable as _enable

    return _enable(fn)


def is_enabled() -> bool:
    """Whether the mode switch is on."""
    from .mode import is_enabled as _is_enabled

    return _is_enabled()


def register_builtins() -> None:
    """Register every built-in implementation: row ops, GEMM and FP8, attention, MoE, collectives (``catalogue``)."""
    from .catalogue import register_builtin

    register_builtin()
