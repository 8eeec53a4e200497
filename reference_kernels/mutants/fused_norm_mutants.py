"""Mutants of the fused norms: the mechanisms by which real fused kernels let the batch in.

- ``add_rmsnorm_block_switch``: fused residual-add + RMSNorm whose launch changes at 256 tokens
  (vllm#48271: the block size switches there). Below ``SWITCH_ROWS`` rows there are too few
  programs to fill the GPU, so each row's sum of squares is split over ``SPLITS`` programs whose
  partials pass through the activation dtype; from ``SWITCH_ROWS`` rows on, one pass per row.
  A row then has one result below 256 and another from 256 on: classes ``{1..255} {256..}``.
- ``rmsnorm_fp8_tensor_dynamic``: the reference RMSNorm, then one e4m3 scale from the amax of
  the whole batch (vllm#57016: online FP8 quantization takes its scale over the batch).

``seen_rows`` overrides the row count a heuristic sees; ``per_call`` turns that into a
run-to-run control (the regime changes from call to call, as atomics' arrival order does).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from ..fp8 import QUANT_DYNAMIC
from ..fused_norm import batch_scale, quantize_e4m3, token_scales
from ..rowops import rms_norm
from .rmsnorm_split import split_sum

SWITCH_ROWS = 256
SPLITS = 4


def _split_norm(z: torch.Tensor, weight: torch.Tensor, eps: float | None, splits: int) -> torch.Tensor:
    n = z.shape[-1]
    eps = torch.finfo(z.dtype).eps if eps is None else float(eps)
    zf = z.float()
    ss = split_sum(zf * zf, splits, z.dtype)
    return (zf * torch.rsqrt(ss / n + eps)[:, None] * weight.float()).to(z.dtype)


def add_rmsnorm_block_switch(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float | None = None, *,
    seen_rows: int | None = None, switch_rows: int = SWITCH_ROWS,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """In place like the reference; the sum of squares split ``SPLITS`` ways below ``switch_rows``
    (256; the interpreter's tiny sweeps move the edge into their range)."""
    rows = x.shape[0] if seen_rows is None else seen_rows
    residual.add_(x)
    x.copy_(_split_norm(residual, weight, eps, SPLITS if rows < switch_rows else 1))
    return x, residual


def rmsnorm_fp8_tensor_dynamic(
    x: torch.Tensor, weight: torch.Tensor, eps: float | None = None, scale: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference RMSNorm, then one scale over the whole batch (``scale`` ignored: dynamic by design)."""
    del scale
    y = rms_norm(x, weight, eps, backend="torch")
    s = batch_scale(y)
    return quantize_e4m3(y, s), s


rmsnorm_fp8_tensor_dynamic.quantization = QUANT_DYNAMIC  # type: ignore[attr-defined]


def per_call(fn: Callable, cycle: tuple[int, ...] = (1, SWITCH_ROWS)) -> Callable:
    """``fn`` with ``seen_rows`` from a call counter: the run-to-run control of a batch-keyed mutant."""
    counter = itertools.cycle(cycle)

    def varying(*args: object) -> object:
        return fn(*args, seen_rows=next(counter))

    varying.__name__ = f"{getattr(fn, '__name__', 'fn')}_per_call"
    return varying


def rmsnorm_fp8_split_per_call() -> Callable:
    """Run-to-run control of ``rmsnorm-fp8-quant``: the norm's split count changes per call
    (1, 2, 3, 4 pieces, partials in x's dtype), then per-token or static quantization."""
    counter = itertools.cycle((1, 2, 3, 4))

    def fn(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None, scale: torch.Tensor | None = None):
        y = _split_norm(x, weight, eps, next(counter))
        s = token_scales(y) if scale is None else scale.float().reshape(1, 1)
        return quantize_e4m3(y, s), s

    fn.__name__ = "rmsnorm_fp8_split_per_call"
    return fn
