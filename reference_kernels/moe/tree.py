"""Fixed-order sums built from element-wise adds.

A reduction kernel may pick its order from the tensor's shape (how many rows,
how many threads), so a row's sum can change with the batch. Summing by halving
the last dimension with element-wise adds fixes the order for every row,
whatever the batch size, device or library: the same pairwise tree each time.
"""

from __future__ import annotations

import torch


def tree_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dimension in a fixed pairwise order (zero-padded to a power of two)."""
    n = x.shape[-1]
    if n == 0:
        return x.new_zeros(x.shape[:-1])
    width = 1
    while width < n:
        width *= 2
    if width != n:
        pad = x.new_zeros((*x.shape[:-1], width - n))
        x = torch.cat([x, pad], dim=-1)
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0]


def ordered_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dimension strictly left to right (for short dims such as top-k slots)."""
    acc = x[..., 0]
    for j in range(1, x.shape[-1]):
        acc = acc + x[..., j]
    return acc
