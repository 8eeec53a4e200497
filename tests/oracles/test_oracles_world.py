"""The world-size oracle: shard-count-dependent sums are caught, a fixed global order is not flagged."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_invariance.oracles.inputs import rows_pool  # noqa: E402
from pytest_invariance.oracles.world import world_size_oracle  # noqa: E402

ROWS = rows_pool(8, (4, 64), 11, torch.bfloat16)  # [M, P, H]: P parts of one global sum


def shard_presum(rows: torch.Tensor, w: int) -> torch.Tensor:
    """Each of ``w`` ranks sums its parts in bf16, then the rank sums are added in bf16."""
    acc = None
    for r in rows.chunk(w, dim=1):
        local = r.sum(1)
        acc = local if acc is None else acc + local
    return acc


def global_order(rows: torch.Tensor, w: int) -> torch.Tensor:
    """Every part in global order in fp32, whatever ``w`` is."""
    acc = rows[:, 0].float()
    for i in range(1, rows.shape[1]):
        acc = acc + rows[:, i].float()
    return acc.to(rows.dtype)


def test_presum_by_shard_diverges_and_names_the_world_size():
    res = world_size_oracle(shard_presum, ROWS, [1, 2, 4])
    assert res.diverged and res.first.label in ("TP2 vs TP1", "TP4 vs TP1")
    assert "TP" in res.describe() and res.trials == 1


def test_fixed_global_order_is_not_flagged():
    res = world_size_oracle(global_order, ROWS, [4, 1, 2])
    assert res.diverged is False and len(res.points) == 2


def test_one_world_size_is_refused():
    with pytest.raises(ValueError, match="at least two world sizes"):
        world_size_oracle(global_order, ROWS, [2, 2])
