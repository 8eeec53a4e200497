"""All-reduce implementations that misbehave on one rank on purpose, for the rank pool's fault tests.

Module-level so that spawned ranks can unpickle them (tests/ is on the parent's sys.path, which a
spawned child inherits). Never registered: they exist only to prove that a stalled or raising rank
ends a call within its timeout.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from pytest_invariance.reference_kernels.collectives.stock import gloo_all_reduce

STALL_S = 120.0  # far beyond any call timeout of the tests


def stall_on_rank_1(parts: torch.Tensor, group: object = None) -> torch.Tensor:
    """Rank 1 sleeps before the collective; the others wait inside it."""
    if dist.get_rank(group) == 1:
        time.sleep(STALL_S)
    return gloo_all_reduce(parts, group)


def raise_on_rank_1(parts: torch.Tensor, group: object = None) -> torch.Tensor:
    """Rank 1 raises before the collective; the others wait inside it."""
    if dist.get_rank(group) == 1:
        raise ValueError("rank 1 refuses")
    return gloo_all_reduce(parts, group)


def ranks_disagree(parts: torch.Tensor, group: object = None) -> torch.Tensor:
    """A correct sum, plus the rank number: every rank ends with other bits."""
    return gloo_all_reduce(parts, group) + dist.get_rank(group)
