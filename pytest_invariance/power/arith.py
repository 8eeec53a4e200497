"""Fixed-order arithmetic for the planted subjects: every bit they produce is designed.

A planted bug must diverge on every host and a clean twin must never diverge, so neither may
lean on a library's reduction order (BLAS, vectorized sums): each output element here is a dot
product whose products are summed left to right inside segments, and the segments' partials
left to right. Elementwise IEEE adds and multiplies give the same bits on every host and for any
batch, so the only thing that changes a row's bits is where the segment cuts fall: that is what
each planted bug chooses by batch size, row tile, bucket or neighbour value.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

K = 32  # reduction length of every planted dot product
H = 8  # outputs per row: several dots, so a reassociation shows in some element of nearly every row
WEIGHT_SEED = 7_919


def weights() -> torch.Tensor:
    """The planted subjects' shared weights ``[H, K]`` (seeded, order-sensitive values)."""
    from pytest_invariance.oracles.inputs import wide_spread

    return wide_spread((H, K), WEIGHT_SEED)


def products(rows: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``rows[N, K] x w[H, K]`` elementwise, laid out ``[K, N, H]`` so that each term of the sum
    is one contiguous slice; exact per element on every host."""
    return (rows.t()[:, :, None] * w.t()[:, None, :]).contiguous()


def segmented_sum(p: torch.Tensor, cuts: Sequence[int] = ()) -> torch.Tensor:
    """Sum ``p[K, ...]`` over its first dim left to right within segments cut at ``cuts``, then
    the segments' partials left to right. ``cuts=()`` is the plain left-to-right sum."""
    bounds = [0, *sorted(c for c in cuts if 0 < c < p.shape[0]), p.shape[0]]
    total = None
    for a, b in zip(bounds, bounds[1:]):
        acc = p[a].clone()
        for k in range(a + 1, b):
            acc += p[k]
        if total is None:
            total = acc
        else:
            total += acc
    assert total is not None
    return total


def even_cuts(splits: int, k: int = K) -> tuple[int, ...]:
    """Cut points of ``k`` into ``splits`` equal segments (split-K with ``splits`` partials)."""
    step = k // splits
    return tuple(range(step, k, step))


def dot_rows(rows: torch.Tensor, w: torch.Tensor, cuts_of_row: Sequence[tuple[int, ...]]) -> torch.Tensor:
    """``[N, H]`` dots where row ``i`` is reduced with ``cuts_of_row[i]``; rows sharing cuts are
    reduced together (one pass per distinct cut pattern)."""
    p = products(rows, w)
    out = torch.empty(p.shape[1:], dtype=p.dtype)
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, cuts in enumerate(cuts_of_row):
        groups.setdefault(tuple(cuts), []).append(i)
    for cuts, idx in groups.items():
        if len(idx) == rows.shape[0]:
            return segmented_sum(p, cuts)
        sel = torch.tensor(idx)
        out[sel] = segmented_sum(p[:, sel], cuts)
    return out


def dot_all(rows: torch.Tensor, w: torch.Tensor, cuts: tuple[int, ...]) -> torch.Tensor:
    """``[N, H]`` dots, every row reduced with the same ``cuts``."""
    return segmented_sum(products(rows, w), cuts)


def with_bits(shape: Sequence[int], bits: int) -> torch.Tensor:
    """A float32 tensor whose every element has exactly the int32 bit pattern ``bits``."""
    signed = bits - (1 << 32) if bits >= 1 << 31 else bits
    return torch.full(tuple(shape), signed, dtype=torch.int32).view(torch.float32)


def next_up(x: torch.Tensor) -> torch.Tensor:
    """``x`` moved one ULP towards +inf (the smallest possible difference)."""
    return torch.nextafter(x, torch.full_like(x, float("inf")))
