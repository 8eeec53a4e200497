"""The split-K workspace reduction of the M-bucket mutant as one kernel (CUDA).

A split-K GEMM writes its fp32 partials to a workspace and one reduction kernel adds them in slice
order, adds the bias and rounds once. Done as torch ops that is three adds, a bias add and a cast:
five launches per GEMM, which a decode step of a 32-layer model repeats more than five hundred
times. This kernel does the same fp32 adds in the same order (``p0 + p1``, then ``+ p2``...), so
its bits equal the torch chain's; only the launch count changes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..launch import Launcher, aligned

BLOCK = 1024


@triton.jit
def _reduce_kernel(P, Bias, Out, MN, N, PARTS: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.load(P + offs, mask=mask, other=0.0)
    for j in tl.static_range(1, PARTS):
        acc = acc + tl.load(P + j * MN + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        acc = acc + tl.load(Bias + offs % N, mask=mask, other=0.0).to(tl.float32)
    tl.store(Out + offs, acc.to(Out.dtype.element_ty), mask=mask)


_launcher = Launcher(_reduce_kernel)


def reduce_partials(partials: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """``partials[P, M, N]`` fp32 (contiguous) summed in slice order, plus ``bias[N]``, rounded to ``dtype``."""
    if partials.dtype != torch.float32 or not partials.is_contiguous():
        raise ValueError(f"partials must be contiguous fp32 [P, M, N], got {partials.dtype} strides {partials.stride()}")
    parts, m, n = partials.shape
    out = torch.empty((m, n), dtype=dtype, device=partials.device)
    if m * n == 0:
        return out
    b = bias.contiguous() if bias is not None else out
    grid = (-(-(m * n) // BLOCK),)
    key = (partials.shape, dtype, None if bias is None else bias.dtype, partials.device.index,
           *aligned(partials, b, out))  # fmt: skip
    _launcher.launch(key, grid, (partials, b, out, m * n, n),
                     {"PARTS": parts, "HAS_BIAS": bias is not None, "BLOCK": BLOCK}, {"num_warps": 4})  # fmt: skip
    return out
