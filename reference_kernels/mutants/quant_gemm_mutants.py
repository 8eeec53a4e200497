"""Mutants of the quantized GEMMs: a K split chosen from the batch, partials in the output dtype.

- ``int4_splitk_by_batch``: Marlin-style int4 GEMM. With few rows a weight-only GEMM has too
  few output tiles to fill the GPU, so Marlin-like kernels split K across programs and reduce
  the slices globally through the output buffer (bf16/fp16). Here: 4 K slices at M <= 16, 2 at
  M <= 64, one above; each slice's fp32 product is rounded to the activation dtype before the
  slices are added.
- ``fp8_block_splitk``: block-FP8 GEMM with the same small-batch split over its K blocks
  (DeepGEMM-style split-K for decode shapes), slices rounded to bf16.

``table`` moves the edges (the interpreter's sweep of 1..5 rows uses 2 slices at M <= 2);
``seen_rows`` overrides the row count the split heuristic sees (``fused_norm_mutants.per_call``
turns it into a run-to-run control).
"""

from __future__ import annotations

import torch

from .. import matmul_cpu
from ..fp8_block import BLOCK, quantize_groups, weight_scale_columns
from ..int4 import dequantize

SPLIT_TABLE = ((16, 4), (64, 2))


def splits_for(m: int, table: tuple[tuple[int, int], ...] = SPLIT_TABLE) -> int:
    for max_m, s in table:
        if m <= max_m:
            return s
    return 1


def _bounds(n_units: int, splits: int) -> list[int]:
    splits = max(1, min(splits, n_units))
    return [round(i * n_units / splits) for i in range(splits + 1)]


def int4_splitk_by_batch(x, qweight, scales, qzeros, *, seen_rows: int | None = None,
                         table: tuple[tuple[int, int], ...] = SPLIT_TABLE) -> torch.Tensor:  # fmt: skip
    """int4 GEMM with K split by the batch size; slices summed through the activation dtype."""
    w = dequantize(qweight, scales, qzeros).to(x.dtype)
    groups = scales.shape[0]
    g = x.shape[1] // groups
    b = _bounds(groups, splits_for(x.shape[0] if seen_rows is None else seen_rows, table))
    acc = None
    for lo, hi in zip(b[:-1], b[1:], strict=True):
        part = matmul_cpu.mm_tiled(x[:, lo * g : hi * g].float(), w[lo * g : hi * g].float()).to(x.dtype).float()
        acc = part if acc is None else acc + part
    return acc.to(x.dtype)


def fp8_block_splitk(x, w_fp8, w_scale, *, seen_rows: int | None = None,
                     table: tuple[tuple[int, int], ...] = SPLIT_TABLE) -> torch.Tensor:  # fmt: skip
    """Block-FP8 GEMM whose K blocks are split into slices by the batch size, slices rounded to bf16."""
    xq, xs = quantize_groups(x)
    m, k = xq.shape
    wsn = weight_scale_columns(w_scale, w_fp8.shape[0])
    nkb = -(-k // BLOCK)
    b = _bounds(nkb, splits_for(m if seen_rows is None else seen_rows, table))
    out = None
    for lo, hi in zip(b[:-1], b[1:], strict=True):
        acc = torch.zeros((m, w_fp8.shape[0]), dtype=torch.float32, device=x.device)
        for kb in range(lo, hi):
            s, e = kb * BLOCK, min(k, (kb + 1) * BLOCK)
            part = matmul_cpu.mm_tiled(xq[:, s:e].float(), w_fp8[:, s:e].float().t())
            acc = acc + (part * xs[:, kb : kb + 1]) * wsn[kb]
        acc = acc.to(torch.bfloat16).float()
        out = acc if out is None else out + acc
    return out.to(torch.bfloat16)
