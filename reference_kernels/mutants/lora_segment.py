"""Mutant: multi-LoRA whose shrink depends on how many tokens share an adapter (SGMV-style).

Segment-based LoRA kernels sort tokens by adapter and give each segment its own tiles; with few
tokens in a segment there is too little work, so the shrink's H reduction is split across
programs whose partials are written in the activation dtype and added. A token's bits then
depend on how many of its neighbours use the same adapter: not only on the batch size, but on
*which* adapters the neighbours use. Here: ``SPLITS`` pieces for a segment of at most
``SMALL_SEGMENT`` tokens, one pass for larger ones. ``seen_rows`` overrides the segment size the
heuristic sees (``fused_norm_mutants.per_call`` makes it a run-to-run control); ``small_segment``
moves the edge (1 token under the interpreter's tiny sweeps).
"""

from __future__ import annotations

import torch

from ..moe.tree import tree_sum
from .rmsnorm_split import split_sum

SMALL_SEGMENT = 4
SPLITS = 4


def lora_segment_splitk(x, base, lora_a, lora_b, ids, scale: float = 1.0, *, seen_rows: int | None = None,
                        small_segment: int = SMALL_SEGMENT):  # fmt: skip
    out = base.clone()
    for a in torch.unique(ids[ids >= 0]).tolist():
        rows = (ids == a).nonzero().flatten()
        seg = rows.numel() if seen_rows is None else seen_rows
        prod = lora_a[a].float()[None] * x[rows].float()[:, None, :]  # [S, R, H]
        y = split_sum(prod, SPLITS if seg <= small_segment else 1, x.dtype) * scale
        delta = tree_sum(lora_b[a].float()[None] * y[:, None, :])
        out[rows] = (base[rows].float() + delta).to(base.dtype)
    return out
