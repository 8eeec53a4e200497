"""The per-op zoo's ground truth: every planted class is caught by the full profile's sizes
(except where its probabilistic detection is measured below the bar), every clean twin passes,
and the quick profile's blind spot is named by its reason.

The full profile is taken to 73 rows (``limit=72``: every size 1..72 and 73, as full sweeps them):
every class fires at or below 65, so the larger sizes add time, not power; ``pytest-invariance
power --profile full`` measures the whole sweep.
"""

from __future__ import annotations

import pytest
import torch
from pytest_invariance.oracles.inputs import rows_pool
from pytest_invariance.oracles.vocabulary import BATCH_SIZE, RUN_TO_RUN

from pytest_invariance.power import arith
from pytest_invariance.power.config import PowerConfig
from pytest_invariance.power.ops import measure_class, miss_reason
from pytest_invariance.power.zoo import OP_CLASSES, stream_k_cuts

BY_NAME = {c.name: c for c in OP_CLASSES}
DETERMINISTIC = [c.name for c in OP_CLASSES if not c.probabilistic]
PROBABILISTIC = [c.name for c in OP_CLASSES if c.probabilistic]


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_full_catches_each_deterministic_class_and_passes_its_twin(name: str) -> None:
    e = measure_class(BY_NAME[name], BATCH_SIZE, PowerConfig(profile="full", limit=72, trials=1))
    assert e["caught"], e
    assert e["twin"] == "invariant" and not e["false_alarm"], e


@pytest.mark.parametrize("name", PROBABILISTIC)
def test_full_catches_each_probabilistic_class_at_a_measured_rate(name: str) -> None:
    e = measure_class(BY_NAME[name], BATCH_SIZE, PowerConfig(profile="full", limit=72, runs=5))
    assert e["caught"] and e["rate"] == 1.0 and e["runs"] == 5, e
    assert e["twin"] == "invariant", e


def test_rare_race_under_run_to_run_is_a_rate_not_a_yes() -> None:
    e = measure_class(BY_NAME["rare-1-in-10"], RUN_TO_RUN, PowerConfig(trials=1, runs=10))
    # 5 calls a trial at 1 in 10 each: seen with probability 1 - 0.9**5 = 0.41 per run
    assert 0.1 <= e["rate"] <= 0.8 and not e["caught"], e
    assert e["reason"] == f"detection {e['rate']:.2f} at 1 trial", e


def test_quick_cannot_see_a_bug_at_exactly_six_and_says_why() -> None:
    e = measure_class(BY_NAME["only-at-6"], BATCH_SIZE, PowerConfig(profile="quick"))
    assert not e["caught"] and e["reason"] == "size not swept: needs N=6", e
    assert miss_reason(BY_NAME["large-batch"], PowerConfig(limit=32), None) == "size not swept: needs N > 64"
    assert miss_reason(BY_NAME["large-batch"], PowerConfig(), None) == ""  # quick reaches 65


def test_every_class_not_run_by_an_oracle_says_why_by_design() -> None:
    for c in OP_CLASSES:
        if RUN_TO_RUN not in c.oracles:
            assert "run-to-run cannot see it" in c.blind[RUN_TO_RUN]
    assert "bitwise" in BY_NAME["signed-zero"].blind["contract"]
    assert "bitwise" in BY_NAME["nan-payload"].blind["contract"]


def test_the_fixed_order_dot_is_the_left_to_right_sum_and_cuts_change_its_bits() -> None:
    x, w = rows_pool(64, (arith.K,), 3), arith.weights()
    plain = arith.segmented_dot(x, w, ())
    manual = torch.zeros_like(plain)
    for k in range(arith.K):
        manual = manual + x[:, k, None] * w[None, :, k]
    assert torch.equal(plain.view(torch.int32), manual.view(torch.int32))
    split = arith.segmented_dot(x, w, arith.even_cuts(4))
    assert (split.view(torch.int32) != plain.view(torch.int32)).any(dim=1).float().mean() > 0.9
    # a row's bits never depend on the rows beside it
    assert torch.equal(arith.segmented_dot(x[:5], w, (4, 8)), arith.segmented_dot(x, w, (4, 8))[:5])


def test_stream_k_cuts_follow_the_number_of_tiles() -> None:
    assert stream_k_cuts(1) == [(4, 8, 12)]  # one tile, 8 units over 6 workers: 2 units each
    two = stream_k_cuts(17)
    assert two[0] != two[16] and len(two) == 17
    assert {stream_k_cuts(n)[0] for n in (1, 17, 33, 65)} != {(4, 8, 12)}


def test_signed_zero_and_nan_payload_differ_only_in_bits() -> None:
    x = rows_pool(16, (arith.K,), 5)
    zero_twin, zero_bug = BY_NAME["signed-zero"].build(False, 0)(x), BY_NAME["signed-zero"].build(True, 0)(x)
    assert torch.equal(zero_twin, zero_bug) and not torch.equal(zero_twin.view(torch.int32), zero_bug.view(torch.int32))
    nan_twin, nan_bug = BY_NAME["nan-payload"].build(False, 0)(x), BY_NAME["nan-payload"].build(True, 0)(x)
    assert torch.equal(nan_twin.isnan(), nan_bug.isnan()) and nan_twin.isnan().any()
    assert not torch.equal(nan_twin.view(torch.int32), nan_bug.view(torch.int32))


def test_the_position_oracle_names_a_size_it_does_not_sample() -> None:
    reason = miss_reason(BY_NAME["only-at-6"], PowerConfig(profile="full"), None, "batch-position")
    assert reason == "size not among the position oracle's 8 sizes: needs N=6"
