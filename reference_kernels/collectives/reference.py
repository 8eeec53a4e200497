"""The reference all-reduce: every element summed in one order fixed by rank, never by size.

All-gather every rank's parts, then add them one after another in global order (rank 0's first),
accumulating in fp32 and rounding once to the parts' dtype. Element ``i`` of the result is then
the same sequence of additions whatever the message size, the row's position in it, or how many
ranks the contributions were spread over (the ``world-size`` oracle's global ``[P, M, H]``).
The price: each rank receives the whole of every other rank's message (``w`` times a ring's data).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def fixed_order_all_reduce(parts: torch.Tensor, group: object = None) -> torch.Tensor:
    """Sum of every rank's parts in global order, fp32 accumulation, one rounding."""
    parts = parts.contiguous()
    w = dist.get_world_size(group)
    gathered = [torch.empty_like(parts) for _ in range(w)]
    dist.all_gather(gathered, parts, group=group)
    acc = None
    for rank_parts in gathered:
        for part in rank_parts:
            acc = part.float() if acc is None else acc + part.float()
    return acc.to(parts.dtype)
