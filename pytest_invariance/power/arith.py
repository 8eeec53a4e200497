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

K = 16  # reduction length of every planted dot product
H = 8  # outputs per row: several dots, so a reassociation shows in some element of nearly every row
WEIGHT_SEED = 7_919


def weights() -> torch.Tensor:
    """The planted subjects' shared weights ``[H, K]`` (seeded, order-sensitive values)."""
    from pytest_invariance.oracles.inputs import wide_spread

    return wide_spread((H, K), WEIGHT_SEED)


def segmented_dot(rows: torch.Tensor, w: torch.Tensor, cuts: Sequence[int] = ()) -> torch.Tensor:
    """``[N, H]`` dots of ``rows[N, K]`` with ``w[H, K]``: the products ``rows[:, k] * w[:, k]``
    summed left to right within segments cut at ``cuts``, then the segments' partials left to
    right. ``cuts=()`` is the plain left-to-right sum. Products are formed first and added after
    (never a fused multiply-add), so each term is exact per element."""
    k_len = rows.shape[1]
    p = rows[:, :, None] * w.t()[None, :, :]  # [N, K, H]: every product, exact per element
    bounds = [0, *sorted(c for c in cuts if 0 < c < k_len), k_len]
    total = None
    for a, b in zip(bounds, bounds[1:], strict=False):
        acc = p[:, a].clone()
        for k in range(a + 1, b):
            acc += p[:, k]
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
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, cuts in enumerate(cuts_of_row):
        groups.setdefault(tuple(cuts), []).append(i)
    if len(groups) == 1:
        return segmented_dot(rows, w, next(iter(groups)))
    out = torch.empty((rows.shape[0], w.shape[0]), dtype=rows.dtype)
    for cuts, idx in groups.items():
        sel = torch.tensor(idx)
        out[sel] = segmented_dot(rows[sel], w, cuts)
    return out


def dot_all(rows: torch.Tensor, w: torch.Tensor, cuts: tuple[int, ...]) -> torch.Tensor:
    """``[N, H]`` dots, every row reduced with the same ``cuts``."""
    return segmented_dot(rows, w, cuts)


def with_bits(shape: Sequence[int], bits: int) -> torch.Tensor:
    """A float32 tensor whose every element has exactly the int32 bit pattern ``bits``."""
    signed = bits - (1 << 32) if bits >= 1 << 31 else bits
    return torch.full(tuple(shape), signed, dtype=torch.int32).view(torch.float32)


def next_up(x: torch.Tensor) -> torch.Tensor:
    """``x`` moved one ULP towards +inf (the smallest possible difference)."""
    return torch.nextafter(x, torch.full_like(x, float("inf")))
