"""Mutant: a GEMM strategy chosen by M, as cuBLAS heuristics and CUTLASS M-bucket dispatch choose one.

For ``M <= max_m`` rows there are too few output tiles to fill the machine, so K is cut into
``parts`` slices whose fp32 partials are summed in slice order and rounded once (a split-K
workspace reduction); above, one stock pass. Every element sums the same K terms either way, in
another order, so its fp32 value differs in the low bits and some elements round to another
16-bit value: a row's bits depend on which side of the bucket edge its batch fell, on any host.
The bundled engine's default mode uses this as its GEMM (``gemm_strategy="m-bucket"``), and the
matmul suites check that it really is ``divergent``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

MAX_M = 8  # token rows up to which the split-K bucket is chosen
PARTS = 4


def _fp32_product(xs: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
    """``xs @ ws.T`` as an fp32 partial: on CUDA straight from the 16-bit operands where torch
    offers ``out_dtype`` (no fp32 copy of the weights), elsewhere on fp32 copies (CPU BLAS has no
    16-bit-in, fp32-out GEMM)."""
    if xs.is_cuda and xs.dtype in (torch.bfloat16, torch.float16):
        try:
            return torch.mm(xs, ws.t(), out_dtype=torch.float32)
        except (TypeError, RuntimeError, NotImplementedError):
            pass
    return F.linear(xs.float(), ws.float())


def _fp32_partials_batched(x: torch.Tensor, w: torch.Tensor, parts: int) -> torch.Tensor | None:
    """All ``parts`` fp32 partials ``[parts, M, N]`` from one batched 16-bit GEMM on CUDA (one launch,
    as a split-K kernel is one), or None where that is not available (CPU, K not divisible)."""
    k = x.shape[-1]
    if not (x.is_cuda and x.dtype in (torch.bfloat16, torch.float16) and x.dim() == 2 and k % parts == 0):
        return None
    xs = x.view(x.shape[0], parts, k // parts).transpose(0, 1)  # [parts, M, K/parts]
    ws = w.view(w.shape[0], parts, k // parts).permute(1, 2, 0)  # [parts, K/parts, N], no copy
    try:
        return torch.bmm(xs, ws, out_dtype=torch.float32)
    except (TypeError, RuntimeError, NotImplementedError):
        return None


def splitk_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, parts: int = PARTS) -> torch.Tensor:
    """``x @ w.T (+ b)`` with K cut into ``parts`` fp32 partials, summed in order, rounded once."""
    batched = _fp32_partials_batched(x, w, parts)
    if batched is not None:  # one workspace reduction kernel: the torch chain below, in one launch
        from .splitk_reduce_triton import reduce_partials

        return reduce_partials(batched, b, x.dtype)
    acc: torch.Tensor | None = None
    for xs, ws in zip(x.tensor_split(parts, dim=-1), w.tensor_split(parts, dim=-1), strict=True):
        part = _fp32_product(xs, ws)
        acc = part if acc is None else acc + part
    assert acc is not None
    if b is not None:
        acc = acc + b.float()
    return acc.to(x.dtype)


def m_bucket_linear(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, *, max_m: int = MAX_M, parts: int = PARTS
) -> torch.Tensor:
    """``matmul`` family signature (plus an optional bias): split-K at ``M <= max_m``, one pass above."""
    if x.shape[0] <= max_m:
        return splitk_linear(x, w, b, parts)
    return F.linear(x, w, b)
