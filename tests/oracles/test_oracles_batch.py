"""The batch oracles see what they must see, and nothing else."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pytest_invariance.oracles.batch import (
    batch_position_oracle,
    batch_size_oracle,
    chunking_oracle,
    rows_chunking,
    run_to_run_oracle,
)
from pytest_invariance.oracles.inputs import rows_pool, with_ties

W = rows_pool(32, (128,), seed=7)


def rowwise(x: torch.Tensor) -> torch.Tensor:
    return torch.stack([F.linear(r[None], W)[0] for r in x])


def size_dependent(x: torch.Tensor) -> torch.Tensor:
    """Reduction order flips at 8 rows: the shape of a kernel switch point."""
    if x.shape[0] < 8:
        return rowwise(x)
    return torch.stack([F.linear(r.flip(0)[None], W.flip(1))[0] for r in x])


def position_dependent(x: torch.Tensor) -> torch.Tensor:
    out = rowwise(x)
    out[1::2] = torch.stack([F.linear(r.flip(0)[None], W.flip(1))[0] for r in x[1::2]]) if x.shape[0] > 1 else out[1::2]
    return out


def test_rowwise_is_invariant_across_sizes() -> None:
    res = batch_size_oracle(rowwise, rows_pool(40, (128,), 1), [1, 2, 7, 8, 9, 33])
    assert res.diverged is False
    assert res.classes == [[1, 2, 7, 8, 9, 33]]


def test_switch_point_shows_as_divergence_and_classes() -> None:
    res = batch_size_oracle(size_dependent, rows_pool(40, (128,), 1), [1, 2, 7, 8, 9, 33])
    assert res.diverged is True
    assert res.first.batch_size == 8
    assert res.evidence()["differing_batch_sizes"] == [8, 9, 33]
    assert res.evidence()["equivalence_classes"] == [[[1, 7]], [[8, 33]]]  # data; text only at the edge
    assert "batch size 8" in res.describe()


def test_position_oracle_finds_odd_positions() -> None:
    res = batch_position_oracle(position_dependent, rows_pool(40, (128,), 2), [9])
    assert res.diverged is True
    assert res.evidence()["differing_positions"] == [1, 7]


def test_position_oracle_passes_rowwise() -> None:
    assert batch_position_oracle(rowwise, rows_pool(40, (128,), 2), [3, 17]).diverged is False


def test_run_to_run_sees_nondeterminism() -> None:
    calls = {"n": 0}

    def flaky(x: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        return rowwise(x) if calls["n"] != 3 else size_dependent(torch.cat([x] * 8))[: x.shape[0]]

    assert run_to_run_oracle(rowwise, rows_pool(4, (128,), 3), 4).diverged is False
    res = run_to_run_oracle(flaky, rows_pool(4, (128,), 3), 4)
    assert res.diverged is True and res.first.label == "repeat 2"


def test_chunking_oracle_over_rows() -> None:
    rows = rows_pool(24, (128,), 4)
    assert chunking_oracle(rows_chunking(rowwise, rows), [1, 5, 8]).diverged is False
    res = chunking_oracle(rows_chunking(size_dependent, rows), [1, 5, 8, 24])
    assert res.diverged is True and {p.label for p in res.points if not p.comparison.equal} == {"chunk 1", "chunk 5"}


def test_trials_accumulate_failures() -> None:
    res = None
    for t in range(3):
        res = batch_size_oracle(size_dependent, rows_pool(10, (128,), t), [1, 9], trial=t, result=res)
    assert res.trials == 3 and res.failures == 3
    ev = res.evidence()
    assert ev["failures"] == 3 and ev["trials"] == 3 and ev["wilson95"][1] == 1.0


def test_inputs_are_reproducible_and_order_sensitive() -> None:
    a, b = rows_pool(4, (256,), 9), rows_pool(4, (256,), 9)
    assert torch.equal(a, b)
    r = a[0]
    forward = r.sum()
    backward = r.flip(0).sum()
    assert forward != backward, "inputs must make reduction order visible"


def test_ties_repeat_the_row_maximum() -> None:
    x = with_ties((4, 64), seed=3)
    assert all(int((row == row.max()).sum()) > 1 for row in x)


def spares_row_zero(x: torch.Tensor) -> torch.Tensor:
    """Row 0 computed one way always; every other row's order flips once the batch reaches 8."""
    out = rowwise(x)
    if x.shape[0] >= 8:
        out[1:] = torch.stack([F.linear(r.flip(0)[None], W.flip(1))[0] for r in x[1:]])
    return out


def test_batch_size_sees_a_bug_that_spares_row_zero() -> None:
    res = batch_size_oracle(spares_row_zero, rows_pool(40, (128,), 1), [1, 2, 7, 8, 9, 33])
    assert res.diverged is True
    bad = [p for p in res.points if not p.comparison.equal]
    assert {p.batch_size for p in bad} == {8}  # rows 1..6 of batch 8 vs batch 7
    assert all(p.position is None and p.label == "rows 0..6 vs batch 7" for p in bad)
    assert res.classes == [[1, 2, 7, 8, 9, 33]]  # the probe row itself never moved


def test_classes_honour_a_declared_ulp_contract() -> None:
    """Under ``ulp<=2`` a one-ULP wobble is the same output: one class, not {1} {2..}."""

    def one_ulp_off_in_batches(x: torch.Tensor) -> torch.Tensor:
        out = x * 1.5
        if x.shape[0] > 1:
            out = torch.nextafter(out, torch.full_like(out, float("inf")))
        return out

    rows = rows_pool(17, (16,), 3)
    strict = batch_size_oracle(one_ulp_off_in_batches, rows, [1, 2, 8, 17])
    assert strict.classes == [[1], [2, 8, 17]] and strict.diverged
    loose = batch_size_oracle(one_ulp_off_in_batches, rows, [1, 2, 8, 17], contract="ulp<=2")
    assert loose.classes == [[1, 2, 8, 17]] and loose.diverged is False


def test_invariant_code_is_never_divergent_over_20_seeds() -> None:
    """No false alarm: a row-wise kernel through the all-rows batch oracle, the position oracle
    and the run-to-run pre-check on 20 fresh pools."""
    from pytest_invariance.oracles.batch import nondeterminism_precheck
    from pytest_invariance.oracles.sweeps import batch_sweep

    sizes = batch_sweep("quick", 33)
    for seed in range(20):
        rows = rows_pool(33, (128,), seed)
        res = batch_size_oracle(rowwise, rows, sizes)
        assert not nondeterminism_precheck(rowwise, rows, 33, result=res)
        assert res.diverged is False, (seed, res.describe())
        assert batch_position_oracle(rowwise, rows, [3, 9, 17, 33]).diverged is False
