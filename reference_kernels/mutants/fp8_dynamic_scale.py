"""Mutant: FP8 GEMM with a dynamic per-tensor activation scale taken over the whole batch.

This is the failure reported upstream for fused-MoE FP8 serving: the
activation scale is ``amax(|x|) / 448`` over *all* rows in the batch, so a
request's quantized values, and hence its output, change when a neighbour
with a larger magnitude joins. The GEMM itself is the batch-invariant
reference; only the scale is shared. The suites must report it ``divergent``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from ..fp8 import QUANT_DYNAMIC, fp8_mm, quantize, quantize_activation, tensor_scale
from .splitk_matmul import PER_CALL_SPLITS


def fp8_dynamic_scale_linear(
    x: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor, x_scale: torch.Tensor | None = None
) -> torch.Tensor:
    """FP8 linear whose activation scale is the amax of the whole batch (``x_scale`` ignored)."""
    del x_scale  # dynamic by construction: the point of the mutant
    s = tensor_scale(x)
    return fp8_mm(quantize(x, s), w_fp8, s, w_scale)


fp8_dynamic_scale_linear.quantization = QUANT_DYNAMIC  # type: ignore[attr-defined]


def fp8_splitk_per_call() -> Callable[..., torch.Tensor]:
    """Run-to-run control: the reference quantization, then a split-K GEMM whose split count
    changes per call and whose partials are stored in bf16 (a bf16 workspace), as some
    split-K epilogues do.

    The dynamic-scale mutant is deterministic call to call, so it cannot serve here, and
    fp32 partials are not enough: sums of exact e4m3 products are often exact in fp32.
    """
    calls = itertools.count()

    def fn(x: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor, x_scale=None) -> torch.Tensor:
        xq, xs = quantize_activation(x, x_scale)
        xs = xs.reshape(-1, 1) if xs.numel() > 1 else xs
        xf, wf = xq.float(), w_fp8.float()
        k = xf.shape[1]
        splits = max(1, min(PER_CALL_SPLITS[next(calls) % len(PER_CALL_SPLITS)], k))
        bounds = [round(i * k / splits) for i in range(splits + 1)]
        acc = torch.zeros((xf.shape[0], wf.shape[0]), dtype=torch.float32, device=x.device)
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            part = (xf[:, lo:hi] @ wf[:, lo:hi].T) * xs * w_scale.float()
            acc = acc + part.to(torch.bfloat16).float()
        return acc.to(torch.bfloat16)

    fn.__name__ = "fp8_splitk_per_call"
    return fn
