"""Batch sizes and positions worth testing.

Kernels change strategy at powers of two and at tile multiples (8, 16, 32, 64,
128...), and CUDA-graph buckets sit on similar ladders, so the sweep visits
each switch point and its neighbours rather than a uniform range.
"""

from __future__ import annotations

from .vocabulary import PROFILES

__all__ = ["PROFILES", "probe_positions", "switch_points"]

_QUICK_POINTS = (1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65)


def switch_points(limit: int) -> list[int]:
    """Powers of two and multiples of 8 below 32 (kernel tile edges), up to ``limit``."""
    points = {1}
    p = 2
    while p <= limit:
        points.add(p)
        p *= 2
    points.update(m for m in (8, 16, 24, 32) if m <= limit)
    return sorted(points)


def batch_sweep(profile: str = "quick", limit: int | None = None) -> list[int]:
    """Sorted batch sizes at switch points ±1, capped at ``limit``.

    ``quick`` stops at 65 rows; ``full`` goes to 2049 (or ``limit``).
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}")
    if profile == "quick":
        sizes = set(_QUICK_POINTS)
        cap = 65 if limit is None else limit
    else:
        cap = 2049 if limit is None else limit
        sizes = set()
        for p in switch_points(cap + 1):
            sizes.update((p - 1, p, p + 1))
    return sorted(n for n in sizes if 1 <= n <= cap)


def probe_positions(n: int) -> list[int]:
    """Positions {0, 1, middle, N-2, N-1} within a batch of ``n`` (deduplicated)."""
    if n < 1:
        raise ValueError("batch size must be >= 1")
    return sorted({p for p in (0, 1, n // 2, n - 2, n - 1) if 0 <= p < n})
