"""Put the built-in MoE implementations in the kernel registry.

Families and call signatures (rows on dim 0 are tokens):

- ``moe-router``: ``fn(logits[T, E], top_k, *, scoring="softmax", renormalize=True,
  n_groups=None, topk_groups=None) -> (weights fp32 [T, k], ids int64 [T, k])``.
- ``moe-experts``: ``fn(x[T, H], w_gate_up[E, 2I, H], w_down[E, H, I], weights[T, k],
  ids[T, k]) -> [T, H]`` (SwiGLU, gate rows first). Implementations whose name
  contains ``fp8`` take the FP8 signature instead: ``fn(x, w_gate_up_fp8,
  w_down_fp8, w_gate_up_scale[E, 2I], w_down_scale[E, H], weights, ids) -> [T, H]``
  (weights as made by ``quantize_weight``).
"""

from __future__ import annotations

from functools import partial


def is_fp8(name: str) -> bool:
    """Whether a ``moe-experts`` implementation takes the FP8 signature."""
    return "fp8" in name


def register_builtin_moe() -> None:
    """Register stock, reference and mutant implementations of ``moe-router`` and ``moe-experts``."""
    from ..mutants.moe_mutants import register_moe_mutants
    from ..registry import register
    from . import fused_experts, fused_experts_fp8
    from .router import route, route_topk_stock
    from .stock import experts_loop

    register(
        "moe-router",
        "torch-topk-sorted",
        partial(route_topk_stock, sorted=True),
        role="stock",
        description="torch.softmax/sigmoid + torch.topk(sorted=True)",
    )
    register(
        "moe-router",
        "torch-topk-unsorted",
        partial(route_topk_stock, sorted=False),
        role="stock",
        description="torch.softmax/sigmoid + torch.topk(sorted=False)",
    )
    register(
        "moe-router",
        "reference",
        route,
        role="reference",
        description="stable descending sort: ties to the lowest expert index; fixed-order sums",
    )
    register(
        "moe-experts",
        "torch-loop",
        experts_loop,
        role="stock",
        description="per-expert loop of torch.mm (M = tokens routed to the expert), index_add_ combine",
    )
    register(
        "moe-experts",
        "reference",
        fused_experts,
        role="reference",
        description="Triton fused MoE (one tile config, no split-K) on CUDA; fixed-order torch on CPU",
    )
    register(
        "moe-experts",
        "reference-fp8",
        fused_experts_fp8,
        role="reference",
        description="FP8 experts, per-token activation scales (fp8 signature)",
    )
    register_moe_mutants()
