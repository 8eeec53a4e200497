"""Mutant: split-K matmul whose split count is chosen from M.

GEMM libraries pick a split-K factor by shape: when M (the batch) is small
there are too few output tiles to fill the GPU, so K is cut into pieces that
run in parallel and are summed afterwards. The sum of the pieces rounds
differently from one long accumulation, so the same row gets different bits
depending on how many other rows share the batch. This mutant reproduces that
heuristic in plain torch (CPU or CUDA) and is the positive control of the
matmul suites: it must come out ``divergent``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

# (max M, K splits): few rows -> many splits, as cuBLAS-style heuristics do.
SPLIT_TABLE: tuple[tuple[int, int], ...] = ((8, 8), (32, 4), (128, 2))


def split_count(m: int, k: int) -> int:
    """Splits for an M x K problem: more for fewer rows, never more than K."""
    for max_m, splits in SPLIT_TABLE:
        if m <= max_m:
            return max(1, min(splits, k))
    return 1


def splitk_matmul(x: torch.Tensor, w: torch.Tensor, splits: int | None = None) -> torch.Tensor:
    """``x[M, K] @ w[N, K].T`` with K cut into ``split_count(M, K)`` pieces.

    Each piece is a full fp32 product, rounded to ``x.dtype`` and added left to
    right into an output-typed accumulator, as split-K kernels that accumulate
    their partial tiles into the output tensor do. (Summed in fp32 and rounded
    once, the pieces of a 16-bit product rarely moved a bit: on the H200 that
    form was a vacuous control for bf16 at K=896 in the full profile.)
    ``splits`` overrides the heuristic (used by the per-call variant).
    """
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"expected x[M, K] and w[N, K], got {tuple(x.shape)} and {tuple(w.shape)}")
    m, k = x.shape
    splits = split_count(m, k) if splits is None else max(1, min(splits, k))
    xf, wf = x.float(), w.float()
    bounds = [round(i * k / splits) for i in range(splits + 1)]
    acc = None
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        part = (xf[:, lo:hi] @ wf[:, lo:hi].T).to(x.dtype)
        acc = part if acc is None else (acc.float() + part.float()).to(x.dtype)
    return acc


PER_CALL_SPLITS = (8, 4, 2, 1)


def splitk_per_call() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A split-K matmul whose split count changes on every call (8, 4, 2, 1, 8, ...).

    Positive control for the run-to-run oracle: libraries that pick a split
    from runtime state (autotuning, available SMs, stream contention) behave so.
    """
    calls = itertools.count()

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return splitk_matmul(x, w, PER_CALL_SPLITS[next(calls) % len(PER_CALL_SPLITS)])

    fn.__name__ = "splitk_matmul_per_call"
    return fn
