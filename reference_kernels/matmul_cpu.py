"""Fast CPU reference matmul: the stock BLAS call, always on 16-row tiles.

A CPU GEMM library (oneDNN / MKL / OpenBLAS) picks its blocking, threading
and, for tiny M, a GEMV-like path from the problem shape, so stock
``F.linear`` on x86 gives a row different bits at batch 1 than at batch 64.
Calling the library on a fixed ``[16, K] x [K, N]`` problem for every tile,
with the batch padded to a multiple of 16, makes the library see one shape
only, whatever the batch. Whether that is enough on a given CPU is not
assumed: the matmul suites check it with the batch-size and batch-position
oracles on every machine they run on.

Only the ``out=`` overloads (``aten::mm.out``, ``aten::addmm.out``) are
called, so the reference mode switch, which replaces the functional
``aten::mm`` / ``aten::addmm`` / ``aten::bmm``, does not recurse into itself.
"""

from __future__ import annotations

import torch

TILE_M = 16


def _padded(a: torch.Tensor) -> torch.Tensor:
    """``a`` (2-D) contiguous with rows padded by zeros to a multiple of ``TILE_M``."""
    m = a.shape[0]
    pad = (-m) % TILE_M
    if pad == 0:
        return a.contiguous()
    out = a.new_zeros((m + pad, a.shape[1]))
    out[:m] = a
    return out


def mm_tiled(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``a[M, K] @ b[K, N] (+ bias)`` computed as ``ceil(M / 16)`` identical 16-row BLAS calls.

    ``bias`` broadcastable to ``[M, N]`` is fused by the library (``addmm``)
    per tile, the same way for every tile.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"expected a[M, K] and b[K, N], got {tuple(a.shape)} and {tuple(b.shape)}")
    m, n = a.shape[0], b.shape[1]
    ap = _padded(a)
    out = torch.empty((ap.shape[0], n), dtype=a.dtype, device=a.device)
    # The bias is materialized to [M, N] so every tile takes the same addmm path.
    full_bias = None if bias is None else _padded(bias.to(a.dtype).expand(m, n))
    for i in range(0, ap.shape[0], TILE_M):
        tile, dst = ap[i : i + TILE_M], out[i : i + TILE_M]
        if full_bias is None:
            torch.mm(tile, b, out=dst)
        else:
            torch.addmm(full_bias[i : i + TILE_M], tile, b, out=dst)
    return out[:m]


def bmm_tiled(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a[B, M, K] @ b[B, K, N]``: one tiled product per batch element, so no element sees the others."""
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]:
        raise ValueError(f"expected a[B, M, K] and b[B, K, N], got {tuple(a.shape)} and {tuple(b.shape)}")
    out = torch.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=a.dtype, device=a.device)
    for i in range(a.shape[0]):
        out[i] = mm_tiled(a[i], b[i])
    return out
