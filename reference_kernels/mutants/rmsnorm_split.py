"""Mutant: RMSNorm that switches to a split reduction for small batches.

With few rows there are too few programs to fill the GPU, so real kernels cut
each row's sum of squares into pieces reduced in parallel and added afterwards
(a two-stage reduction whose first stage writes its partials to a buffer of
the activation dtype). The pieces round differently from one pass over the row, so a row's output depends on how many rows share the batch.
This mutant reproduces that switch in plain torch (CPU or CUDA) and is the
positive control of the ``rmsnorm`` suites: it must come out ``divergent``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

# (max rows, pieces per row): fewer rows -> more pieces, as occupancy heuristics do.
SPLIT_TABLE: tuple[tuple[int, int], ...] = ((4, 8), (16, 4), (32, 3))


def split_count(m: int, n: int) -> int:
    """Pieces per row for an M x N problem: more for fewer rows, one from 33 rows on."""
    for max_m, splits in SPLIT_TABLE:
        if m <= max_m:
            return max(1, min(splits, n))
    return 1


def split_sum(v: torch.Tensor, splits: int, partial_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Sum over the last dim: one pass when ``splits == 1``, else per-piece sums added left to right.

    ``partial_dtype`` rounds each partial through that dtype, as a first stage
    that writes its partials to a buffer of the tensor's own dtype does.
    """
    if splits <= 1:
        return v.sum(dim=-1)
    n = v.shape[-1]
    bounds = [round(i * n / splits) for i in range(splits + 1)]
    acc = None
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        part = v[..., lo:hi].sum(dim=-1)
        if partial_dtype is not None:
            part = part.to(partial_dtype).to(v.dtype)
        acc = part if acc is None else acc + part
    return acc


def split_rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float | None = None, *, splits: int | None = None
) -> torch.Tensor:
    """``x[M, H]`` normalised with a sum of squares split by ``split_count(M, H)``.

    fp32 arithmetic; the partials pass through x's dtype between the stages.

    ``splits`` overrides the heuristic (see ``per_call_splits``).
    """
    if x.dim() != 2:
        raise ValueError(f"expected x[M, H], got {tuple(x.shape)}")
    m, n = x.shape
    eps = torch.finfo(x.dtype).eps if eps is None else float(eps)
    xf = x.float()
    ss = split_sum(xf * xf, splits or split_count(m, n), x.dtype)
    y = xf * torch.rsqrt(ss / n + eps)[:, None] * weight.float()
    return y.to(x.dtype)


def per_call_splits(fn: Callable[..., torch.Tensor], cycle: tuple[int, ...] = (1, 2, 3, 4)) -> Callable:
    """``fn`` with its split count taken from a call counter instead of the batch.

    A stand-in for reductions whose order changes from run to run (atomics
    landing in arrival order): the positive control of ``run-to-run`` checks,
    where a batch-dependent mutant would stay silent.
    """
    counter = itertools.cycle(cycle)

    def varying(*args: object) -> torch.Tensor:
        return fn(*args, splits=next(counter))

    varying.__name__ = f"{getattr(fn, '__name__', 'fn')}_per_call"
    return varying
