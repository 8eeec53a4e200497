"""Seeded inputs that make reductions order-sensitive.

Linspace or all-equal inputs sum to the same bits in any order, so they hide
split-K and split-KV effects. These generators mix magnitudes across many
binades and both signs, so any change in reduction order changes low bits.
Every generator takes an explicit seed and uses its own ``torch.Generator``,
so a record's seed reproduces its inputs.
"""

from __future__ import annotations

import torch


def wide_spread(
    shape: tuple[int, ...],
    seed: int,
    dtype: torch.dtype = torch.float32,
    *,
    decades: float = 4.0,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Normal values scaled by 2**u with u uniform in ±decades binades (random signs).

    The spread is moderate by default so fp16/bf16 and fp8 stay in range
    after a few products; pass ``decades`` to widen it.
    """
    dev = torch.device(device)
    # Generated where it is used: CPU generation of GPU-sized pools (33 sequences of
    # 8192 tokens x 32 heads) costs minutes. Values differ per device type, never per run.
    g = torch.Generator(device=dev).manual_seed(int(seed))
    base = torch.randn(shape, generator=g, dtype=torch.float32, device=dev)
    expo = (torch.rand(shape, generator=g, dtype=torch.float32, device=dev) * 2 - 1) * decades
    x = base * torch.exp2(expo)
    return x.to(dtype)


def rows_pool(
    n_rows: int,
    row_shape: tuple[int, ...],
    seed: int,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    **kw,
) -> torch.Tensor:
    """``n_rows`` distinct order-sensitive rows stacked along dim 0."""
    return wide_spread((n_rows, *row_shape), seed, dtype, device=device, **kw)


def with_ties(
    shape: tuple[int, ...], seed: int, *, tie_fraction: float = 0.25, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Values where a fraction of entries per row repeat the row maximum exactly (top-k stress)."""
    x = wide_spread(shape, seed, torch.float32, decades=1.0)
    g = torch.Generator().manual_seed(int(seed) + 1)
    mask = torch.rand(shape, generator=g) < tie_fraction
    top = x.amax(dim=-1, keepdim=True).expand_as(x)
    return torch.where(mask, top, x).to(dtype)
