"""Positive controls a user test can pass as ``control=``: the shipped mutants, ready to call.

A mutant takes its weights as arguments (the registry's family signature); a user's check wants
``fn(rows) -> out``. These factories bind the weights, so ``control=splitk_matmul(w)`` is all a
test needs. Each control is batch-dependent by design on every host (its split count follows the
batch), never by accident of the host's BLAS.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Rows = Any  # a torch.Tensor with the batch on dim 0 (torch loads only when a control is made)


def _named(fn: Callable[[Rows], Rows], name: str) -> Callable[[Rows], Rows]:
    fn.__name__ = fn.__qualname__ = name  # the control's name in records and messages
    return fn


def splitk_matmul(weight: Rows) -> Callable[[Rows], Rows]:
    """``x[M, K] @ weight[N, K].T`` with K split 8/4/2/1 ways for M <= 8/32/128/more."""
    from .reference_kernels.mutants.splitk_matmul import splitk_matmul as mutant

    return _named(lambda x: mutant(x, weight), "mutant:splitk-matmul")


def m_bucket_matmul(weight: Rows, max_m: int = 8) -> Callable[[Rows], Rows]:
    """``x @ weight.T`` as split-K with fp32 partials at M <= ``max_m`` rows, one pass above."""
    from .reference_kernels.mutants.mbucket_matmul import m_bucket_linear

    return _named(lambda x: m_bucket_linear(x, weight, max_m=max_m), "mutant:m-bucket-splitk")


def split_rmsnorm(weight: Rows, eps: float | None = None) -> Callable[[Rows], Rows]:
    """RMSNorm whose sum of squares is split 8/4/3/1 ways for M <= 4/16/32/more."""
    from .reference_kernels.mutants.rmsnorm_split import split_rmsnorm as mutant

    return _named(lambda x: mutant(x, weight, eps), "mutant:rmsnorm-split")


def split_log_softmax() -> Callable[[Rows], Rows]:
    """log-softmax over the last dim whose sum of exp is split by the batch size."""
    from .reference_kernels.mutants.rowsplit import split_log_softmax as mutant

    return _named(lambda x: mutant(x), "mutant:logsoftmax-split")


def split_mean() -> Callable[[Rows], Rows]:
    """Row mean whose sum is split by the batch size."""
    from .reference_kernels.mutants.rowsplit import split_mean as mutant

    return _named(lambda x: mutant(x), "mutant:mean-split")


__all__ = ["m_bucket_matmul", "split_log_softmax", "split_mean", "split_rmsnorm", "splitk_matmul"]
