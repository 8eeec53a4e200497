"""Batch sizes and positions worth testing.

Kernels change strategy at powers of two and at tile multiples (8, 16, 32, 64,
128...), and CUDA-graph buckets sit on similar ladders, so the sweep visits
each switch point and its neighbours rather than a uniform range.
"""

from __future__ import annotations

from .vocabulary import PROFILES

__all__ = ["CAPTURE_LADDERS", "PROFILES", "batch_sweep", "probe_positions", "switch_points"]

_QUICK_POINTS = (1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65)
QUICK_CAP, FULL_EVERY, FULL_CAP, EXHAUSTIVE_CAP = 65, 512, 8192, 512

# CUDA-graph capture ladders: a batch is padded up to the next captured size, so each edge is a
# place where a row's arithmetic may change.
VLLM_CAPTURE_SIZES = (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))  # vLLM v1 default (0.10-0.11), up to 512
SGLANG_CAPTURE_SIZES = (1, 2, 4, 8, *range(16, 161, 8), *range(168, 257, 8))  # SGLang 0.4-0.5, >90 GB GPUs to 256
CAPTURE_LADDERS = {"vllm": VLLM_CAPTURE_SIZES, "sglang": SGLANG_CAPTURE_SIZES}


def switch_points(limit: int) -> list[int]:
    """Powers of two and multiples of 8 below 32 (kernel tile edges), up to ``limit``."""
    points = {1}
    p = 2
    while p <= limit:
        points.add(p)
        p *= 2
    points.update(m for m in (8, 16, 24, 32) if m <= limit)
    return sorted(points)


def _plus_minus_one(points: object) -> set[int]:
    return {q for p in points for q in (p - 1, p, p + 1)}  # type: ignore[union-attr]


def batch_sweep(profile: str = "quick", limit: int | None = None) -> list[int]:
    """Sorted batch sizes for a profile; ``limit`` caps it, or extends it with the same rule.

    - ``quick``: switch points +-1 and the vLLM / SGLang capture ladders +-1, to 65 rows;
    - ``full``: every size from 1 to 512, then powers of two +-1 up to 8192 rows;
    - ``exhaustive``: every size from 1 to ``limit`` (512 without one).
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if profile == "exhaustive":
        return list(range(1, (EXHAUSTIVE_CAP if limit is None else limit) + 1))
    if profile == "quick":
        cap = QUICK_CAP if limit is None else limit
        sizes = set(_QUICK_POINTS) | _plus_minus_one(switch_points(cap + 1))
        for ladder in CAPTURE_LADDERS.values():
            sizes |= _plus_minus_one(ladder)
    else:
        cap = FULL_CAP if limit is None else limit
        sizes = set(range(1, FULL_EVERY + 1)) | _plus_minus_one(switch_points(cap + 1))
    return sorted(n for n in sizes if 1 <= n <= cap)


def probe_positions(n: int) -> list[int]:
    """Positions {0, 1, middle, N-2, N-1} within a batch of ``n`` (deduplicated)."""
    if n < 1:
        raise ValueError("batch size must be >= 1")
    return sorted({p for p in (0, 1, n // 2, n - 2, n - 1) if 0 <= p < n})
