"""Mutants: log-softmax and mean whose row reduction splits by batch size.

The same occupancy heuristic as ``rmsnorm_split``: for small batches each
row's sum (of exponentials, or of values) is cut into pieces whose partial
sums are added afterwards, so the bits of a row depend on the batch it rode
in. They are the positive controls of the ``softmax`` suites (log-softmax and
mean) and must come out ``divergent``.
"""

from __future__ import annotations

import torch

from .rmsnorm_split import split_count, split_sum


def split_log_softmax(x: torch.Tensor) -> torch.Tensor:
    """``log_softmax(x[M, V], -1)`` with the sum of exponentials split by ``split_count(M, V)``."""
    if x.dim() != 2:
        raise ValueError(f"expected x[M, V], got {tuple(x.shape)}")
    xf = x.float()
    shifted = xf - xf.amax(dim=-1, keepdim=True)
    lse = torch.log(split_sum(torch.exp(shifted), split_count(*x.shape)))
    return (shifted - lse[:, None]).to(x.dtype)


def split_mean(x: torch.Tensor) -> torch.Tensor:
    """``x[M, V].mean(-1)`` with the row sum split by ``split_count(M, V)``.

    Partials are kept in x's dtype between the two stages (fp32 arithmetic
    inside each): a single output per row in bf16 would otherwise round a
    one-ulp fp32 difference away almost every time.
    """
    if x.dim() != 2:
        raise ValueError(f"expected x[M, V], got {tuple(x.shape)}")
    return (split_sum(x.float(), split_count(*x.shape), x.dtype) / x.shape[-1]).to(x.dtype)


def register_rowsplit() -> None:
    """Add ``mutant:logsoftmax-split`` (family ``softmax``) and ``mutant:mean-split`` (``mean``)."""
    from ..registry import register

    register(
        "softmax",
        "mutant:logsoftmax-split",
        split_log_softmax,
        role="mutant",
        description="sum of exp split into 8/4/3/1 pieces for M<=4/16/32/more",
    )
    register(
        "mean",
        "mutant:mean-split",
        split_mean,
        role="mutant",
        description="row sum split into 8/4/3/1 pieces for M<=4/16/32/more",
    )
