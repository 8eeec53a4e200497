"""Batch-invariant MoE: deterministic router and fused experts.

Public entry points (family signatures, rows on dim 0 are tokens):

- ``moe-router``: ``route(logits[T, E], top_k, *, scoring="softmax", renormalize=True,
  n_groups=None, topk_groups=None) -> (weights fp32 [T, k], ids int64 [T, k])``;
  ties go to the lowest expert index, slots ordered by score (see ``router``).
- ``moe-experts``: ``fused_experts(x[T, H], w_gate_up[E, 2I, H], w_down[E, H, I],
  weights[T, k], ids[T, k]) -> [T, H]`` of x's dtype, SwiGLU experts
  (gate rows first), fp32 accumulation, slot-ordered fp32 combine.
- ``moe-experts`` FP8: ``fused_experts_fp8(x, w_gate_up_fp8, w_down_fp8,
  w_gate_up_scale[E, 2I], w_down_scale[E, H], weights, ids) -> [T, H]``,
  per-token activation scales; ``quantize_weight(w) -> (w_fp8, scale)`` prepares weights.

On CUDA the experts run the Triton kernels of ``fused_triton`` (one fixed tile
configuration, no split-K) for bf16/fp16 and FP8; elsewhere (CPU, fp32) the torch path of ``experts_torch``.
Both compute each token's output from that token's data alone.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .experts_torch import fp8_experts_torch, fused_experts_torch, quantize_rows, quantize_weight
from .router import route, route_topk_stock


def fused_experts(
    x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor
) -> torch.Tensor:
    """Batch-invariant fused SwiGLU experts: Triton on CUDA, the fixed-order torch path elsewhere."""
    run = fused_experts_torch
    if x.is_cuda and x.dtype in (torch.bfloat16, torch.float16):
        from .fused_triton import fused_experts_triton as run
    return run(x, w_gate_up, w_down, weights, ids)


def fused_experts_fp8(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    w_gate_up_scale: torch.Tensor,
    w_down_scale: torch.Tensor,
    weights: torch.Tensor,
    ids: torch.Tensor,
    *,
    quantize: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] = quantize_rows,
) -> torch.Tensor:
    """Batch-invariant FP8 experts with per-token activation scales (Triton on CUDA).

    ``quantize`` chooses the activation scales; the one dispatch for every FP8 experts variant
    (the batch-scale mutant passes a per-tensor quantizer).
    """
    run = fp8_experts_torch
    if x.is_cuda:
        from .fused_triton import fp8_experts_triton as run
    return run(x, w_gate_up, w_down, w_gate_up_scale, w_down_scale, weights, ids, quantize=quantize)


__all__ = [
    "fp8_experts_torch",
    "fused_experts",
    "fused_experts_fp8",
    "fused_experts_torch",
    "quantize_weight",
    "route",
    "route_topk_stock",
]
