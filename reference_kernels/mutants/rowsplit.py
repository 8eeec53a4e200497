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


def split_log_softmax(x: torch.Tensor, *, splits: int | None = None) -> torch.Tensor:
    """``log_softmax(x[M, V], -1)`` with the sum of exponentials split by ``split_count(M, V)``.

    fp32 arithmetic; the partials pass through x's dtype between the stages.
    """
    if x.dim() != 2:
        raise ValueError(f"expected x[M, V], got {tuple(x.shape)}")
    xf = x.float()
    shifted = xf - xf.amax(dim=-1, keepdim=True)
    lse = torch.log(split_sum(torch.exp(shifted), splits or split_count(*x.shape), x.dtype))
    return (shifted - lse[:, None]).to(x.dtype)


def split_mean(x: torch.Tensor, *, splits: int | None = None) -> torch.Tensor:
    """``x[M, V].mean(-1)`` with the row split into ``split_count(M, V)`` pieces.

    Each piece's sum (fp32) is divided by V and written in x's dtype; the
    second stage adds those partial means in x's dtype, as a naive two-stage
    kernel does. One output per row: a split kept in fp32 would almost never
    show through bf16/fp16 rounding, so the control would prove nothing.
    """
    if x.dim() != 2:
        raise ValueError(f"expected x[M, V], got {tuple(x.shape)}")
    m, n = x.shape
    k = splits or split_count(m, n)
    if k <= 1:
        return (x.float().sum(dim=-1) / n).to(x.dtype)
    bounds = [round(i * n / k) for i in range(k + 1)]
    acc = None
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        part = (x[:, lo:hi].float().sum(dim=-1) / n).to(x.dtype)
        acc = part if acc is None else acc + part
    return acc
