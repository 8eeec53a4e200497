"""The world-size oracle: the same global tensor reduced by 1, 2 and 4 ranks must give the same bits.

Tensor parallelism splits one reduction over ranks, so the shard count is a second batch axis that
no single-device check sees (what SGLang's determinism driver calls TP1 vs TP2). The oracle only
compares: ``f(rows, w)`` is whatever runs the subject at world size ``w`` on the global ``rows``
(spawning ranks is the caller's job, never this module's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .batch import OracleResult, Point, start_trial
from .compare import BITWISE, Contract, compare
from .vocabulary import WORLD_SIZE

WorldFn = Callable[[torch.Tensor, int], torch.Tensor]


def world_size_oracle(
    f: WorldFn,
    rows: torch.Tensor,
    world_sizes: Sequence[int],
    *,
    contract: str | Contract = BITWISE,
    trial: int = 0,
    result: OracleResult | None = None,
) -> OracleResult:
    """Every world size's output against the smallest one's (``TP1`` when 1 is among them).

    A point per world size, labelled ``TPw vs TPw0``; its ``batch_size`` is the row count, so the
    evidence names the message the ranks reduced."""
    c, res = start_trial(WORLD_SIZE, contract, result)
    sizes = sorted(set(world_sizes))
    if len(sizes) < 2:
        raise ValueError(f"world-size oracle needs at least two world sizes, got {list(world_sizes)}")
    base = f(rows, sizes[0]).detach().clone()
    for w in sizes[1:]:
        out = f(rows, w)
        res.add(Point(rows.shape[0], None, trial, compare(base, out, c), label=f"TP{w} vs TP{sizes[0]}"))
    res.trials += 1
    return res
