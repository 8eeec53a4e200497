"""MoE mutants: realistic batch-variant routers and experts (positive controls).

- ``round_robin_ties_router``: a load-balancing router that breaks ties
  between equal scores round-robin. Its pointer starts at the row's position in
  the batch and persists across calls (router state kept between steps), so
  which of several tied experts a token gets depends on its neighbours, on its
  position and on every batch routed before. Rows without ties are routed
  exactly like the reference.
- ``fp8_experts_batch_scale``: FP8 experts whose activation scale is the max
  over the whole batch (per-tensor dynamic quantization), the failure reported
  for vLLM's fused MoE (#57016): one large neighbour coarsens everyone's grid.
- ``experts_atomic_combine``: the reference experts, but the k slot outputs of a
  token are added in an order that changes from call to call, as atomicAdd
  arrival order does, each add rounded in the output dtype (so even k=2
  differs); the run-to-run control of ``moe-experts``.
"""

from __future__ import annotations

import itertools
from functools import partial

import torch

from ..moe import fused_experts_fp8
from ..moe.experts_torch import check_shapes, quantize_tensor, slot_outputs_torch
from ..moe.router import group_mask, scores_of


class RoundRobinTieRouter:
    """Router whose tie-break rotates with a pointer kept across calls (see module doc)."""

    def __init__(self) -> None:
        self.cursor = 0

    def __call__(
        self,
        logits: torch.Tensor,
        top_k: int,
        *,
        scoring: str = "softmax",
        renormalize: bool = True,
        n_groups: int | None = None,
        topk_groups: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        t, e = logits.shape
        scores = scores_of(logits, scoring)
        masked = scores
        if n_groups is not None:
            masked = scores.masked_fill(~group_mask(scores, n_groups, topk_groups), float("-inf"))
        start = (self.cursor + torch.arange(t, device=logits.device)) % e
        pref = (torch.arange(e, device=logits.device)[None, :] - start[:, None]) % e
        by_pref = torch.argsort(pref, dim=-1, stable=True)  # experts in round-robin order
        _, order = torch.sort(masked.gather(1, by_pref), dim=-1, descending=True, stable=True)
        ids = by_pref.gather(1, order)[:, :top_k]
        weights = scores.gather(1, ids)
        if renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        self.cursor = (self.cursor + t * top_k) % e
        return weights, ids


round_robin_ties_router = RoundRobinTieRouter()


# FP8 experts with one activation scale per batch (max over all tokens): the reference dispatch
# with a per-tensor quantizer.
fp8_experts_batch_scale = partial(fused_experts_fp8, quantize=quantize_tensor)


_calls = itertools.count()


def reset_moe_mutants() -> None:
    """Put the stateful mutants back at their initial state.

    Suites call this at the start of each test, so a test's evidence depends only on
    its own calls, never on which tests ran before it in the same (xdist worker) process.
    """
    global _calls
    round_robin_ties_router.cursor = 0
    _calls = itertools.count()


def experts_atomic_combine(
    x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor
) -> torch.Tensor:
    """Reference slot outputs, summed in a slot order that rotates with every call."""
    check_shapes(x, w_gate_up, w_down, weights, ids)
    if x.is_cuda and x.dtype in (torch.bfloat16, torch.float16):
        from ..moe.fused_triton import fused_experts_triton

        y = fused_experts_triton(x, w_gate_up, w_down, weights, ids, slots=True)
    else:
        y = slot_outputs_torch(x, w_gate_up, w_down, ids)
    k = ids.shape[1]
    shift = next(_calls) % max(1, k)
    contrib = y * weights.float()[:, :, None]
    # Each atomicAdd lands in the output buffer (x.dtype) and is rounded there.
    acc = contrib[:, shift].to(x.dtype)
    for j in range(1, k):
        acc = (acc.float() + contrib[:, (shift + j) % k]).to(x.dtype)
    return acc
