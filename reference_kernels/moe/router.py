"""Deterministic MoE router: scoring, (grouped) top-k with a documented tie-break.

``torch.topk`` promises nothing about which of several equal scores wins, nor
about slot order for ties (``sorted=False`` or ``sorted=True``). Tied router
scores are not rare: bf16 logits, saturated sigmoids and quantized routers all
produce them. This router fixes the rule: experts are ranked by score, highest
first, and **among equal scores the lowest expert index wins** (a stable sort
over the expert axis). Every step is element-wise or a per-row stable sort, and
sums (softmax denominator, renormalisation) use a fixed-order tree, so a row's
weights and ids depend on that row's logits alone: on any batch size, position
or device kind.

Signature (family ``moe-router``)::

    route(logits[T, E], top_k, *, scoring="softmax", renormalize=True,
          n_groups=None, topk_groups=None) -> (weights fp32 [T, k], ids int64 [T, k])

Grouped top-k (DeepSeek-style group-limited routing): the E experts are cut
into ``n_groups`` contiguous groups, a group scores the max of its experts'
scores, the ``topk_groups`` best groups are kept (same tie-break: lowest group
index), and the top-k is taken among the experts of the kept groups.
"""

from __future__ import annotations

import torch

from .detmath import det_exp, det_sigmoid
from .tree import ordered_sum, tree_sum

SCORINGS = ("softmax", "sigmoid")


def scores_of(logits: torch.Tensor, scoring: str = "softmax") -> torch.Tensor:
    """fp32 router scores per row: softmax (fixed-order denominator) or sigmoid.

    ``det_exp``/``det_sigmoid`` instead of ``torch.exp``/``torch.sigmoid``: the
    latter round differently in the SIMD body and the scalar tail on CPU.
    """
    x = logits.float()
    if scoring == "softmax":
        m = x.amax(dim=-1, keepdim=True)  # a max is exact in any order
        e = det_exp(x - m)
        return e / tree_sum(e).unsqueeze(-1)
    if scoring == "sigmoid":
        return det_sigmoid(x)
    raise ValueError(f"unknown scoring {scoring!r}; expected one of {', '.join(SCORINGS)}")


def stable_topk(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k along the last dim, highest first, ties to the lowest index (stable descending sort)."""
    vals, idx = torch.sort(values, dim=-1, descending=True, stable=True)
    return vals[..., :k], idx[..., :k]


def group_mask(scores: torch.Tensor, n_groups: int, topk_groups: int) -> torch.Tensor:
    """Boolean [T, E]: experts that belong to the ``topk_groups`` best groups of each row."""
    t, e = scores.shape
    if e % n_groups:
        raise ValueError(f"{e} experts do not split into {n_groups} groups")
    if not 1 <= topk_groups <= n_groups:
        raise ValueError(f"topk_groups must be in 1..{n_groups}, got {topk_groups}")
    group_scores = scores.view(t, n_groups, e // n_groups).amax(dim=-1)
    _, keep = stable_topk(group_scores, topk_groups)
    gmask = torch.zeros(t, n_groups, dtype=torch.bool, device=scores.device)
    gmask.scatter_(1, keep, True)
    return gmask.repeat_interleave(e // n_groups, dim=1)


def route(
    logits: torch.Tensor,
    top_k: int,
    *,
    scoring: str = "softmax",
    renormalize: bool = True,
    n_groups: int | None = None,
    topk_groups: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick ``top_k`` experts per row; returns (weights fp32 [T, k], ids int64 [T, k]).

    Slots are ordered by score, highest first, ties to the lowest expert index.
    With ``renormalize`` the k weights are divided by their sum (added in slot
    order), otherwise they are the raw scores.
    """
    if logits.dim() != 2:
        raise ValueError(f"expected logits[T, E], got shape {tuple(logits.shape)}")
    e = logits.shape[1]
    if not 1 <= top_k <= e:
        raise ValueError(f"top_k must be in 1..{e}, got {top_k}")
    scores = scores_of(logits, scoring)
    if n_groups is not None:
        if topk_groups is None:
            raise ValueError("n_groups needs topk_groups")
        if topk_groups * (e // n_groups) < top_k:
            raise ValueError(f"{topk_groups} groups of {e // n_groups} experts cannot hold top_k={top_k}")
        masked = scores.masked_fill(~group_mask(scores, n_groups, topk_groups), float("-inf"))
        _, ids = stable_topk(masked, top_k)
        weights = scores.gather(1, ids)
    else:
        weights, ids = stable_topk(scores, top_k)
    if renormalize:
        weights = weights / ordered_sum(weights).unsqueeze(-1)
    return weights.contiguous(), ids.to(torch.int64).contiguous()


def route_topk_stock(
    logits: torch.Tensor,
    top_k: int,
    *,
    scoring: str = "softmax",
    renormalize: bool = True,
    n_groups: int | None = None,
    topk_groups: int | None = None,
    sorted: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The stock router: ``torch.softmax``/``sigmoid`` and ``torch.topk(sorted=...)``.

    Grouped routing uses ``torch.topk`` for the group choice too, as engines do.
    """
    x = logits.float()
    scores = torch.softmax(x, dim=-1) if scoring == "softmax" else torch.sigmoid(x)
    if n_groups is not None:
        t, e = scores.shape
        gs = scores.view(t, n_groups, e // n_groups).amax(dim=-1)
        keep = torch.topk(gs, topk_groups, dim=-1, sorted=sorted).indices
        gmask = torch.zeros_like(gs, dtype=torch.bool).scatter_(1, keep, True)
        gmask = gmask.repeat_interleave(e // n_groups, dim=1)
        masked = scores.masked_fill(~gmask, float("-inf"))
        ids = torch.topk(masked, top_k, dim=-1, sorted=sorted).indices
        weights = scores.gather(1, ids)
    else:
        weights, ids = torch.topk(scores, top_k, dim=-1, sorted=sorted)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int64)
