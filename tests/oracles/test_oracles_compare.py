"""Comparisons, contracts, verdicts, Wilson intervals, sweeps and equivalence classes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from pytest_invariance.oracles import verdict as V
from pytest_invariance.oracles.classes import equivalence_classes, format_classes
from pytest_invariance.oracles.compare import compare, parse_contract
from pytest_invariance.oracles.stats import wilson_interval
from pytest_invariance.oracles.sweeps import batch_sweep, probe_positions


def test_compare_reports_first_index_counts_and_ulps() -> None:
    a = torch.zeros(3, 4)
    b = a.clone()
    b[1, 2] = torch.nextafter(torch.tensor(0.0), torch.tensor(1.0))
    b[2, 3] = 1.0
    c = compare(a, b)
    assert not c.equal and not c.bitwise_equal
    assert c.first_index == (1, 2)
    assert c.n_diff == 2 and c.numel == 12 and c.frac_diff == pytest.approx(2 / 12)
    assert c.max_ulp == float(0x3F800000)
    assert c.max_abs == 1.0
    assert c.contract == "bitwise"


def test_signed_zero_is_a_bitwise_difference_but_zero_ulp() -> None:
    c = compare(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not c.equal and c.max_ulp == 0.0


def test_ulp_contract_is_declared_and_applied() -> None:
    a = torch.tensor([1.0])
    b = torch.nextafter(a, torch.tensor([2.0]))
    assert compare(a, b, "ulp<=1").equal
    assert not compare(a, b, "ulp<=0").equal
    assert compare(a, b, "ulp<=1").contract == "ulp<=1"
    assert not compare(a, b, "ulp<=1").bitwise_equal


def test_tolerance_contract_round_trips() -> None:
    c = parse_contract("tolerance(atol=1e-3, rtol=0)")
    assert str(c) == "tolerance(atol=0.001, rtol=0)"
    assert parse_contract(str(c)) == c
    assert compare(torch.tensor([1.0]), torch.tensor([1.0005]), c).equal


@pytest.mark.parametrize("bad", ["exact", "ulp<=x", "tolerance(1,2)", ""])
def test_unknown_contract_is_a_clear_error(bad: str) -> None:
    with pytest.raises(ValueError, match="unknown contract"):
        parse_contract(bad)


def test_shape_and_dtype_mismatch_are_errors() -> None:
    with pytest.raises(ValueError, match="shape mismatch"):
        compare(torch.zeros(2), torch.zeros(3))
    with pytest.raises(TypeError, match="dtype mismatch"):
        compare(torch.zeros(2), torch.zeros(2, dtype=torch.float16))


@pytest.mark.parametrize(
    "diverged, control, kw, expected",
    [
        (True, True, {}, V.DIVERGENT),
        (True, None, {}, V.DIVERGENT),
        (False, True, {}, V.INVARIANT),
        (False, False, {}, V.VACUOUS),
        (False, None, {}, V.VACUOUS),
        (None, True, {}, V.INCOMPLETE),
        (False, True, {"error": True}, V.INCOMPLETE),
        (False, True, {"unsupported": True}, V.UNSUPPORTED),
    ],
)
def test_decide(diverged, control, kw, expected) -> None:
    assert V.decide(diverged, control, **kw) == expected


def test_worst_verdict_prefers_divergence() -> None:
    assert V.worst([V.INVARIANT, V.VACUOUS, V.DIVERGENT]) == V.DIVERGENT
    assert V.worst([V.INVARIANT, V.VACUOUS]) == V.VACUOUS


@given(st.integers(1, 10_000), st.data())
def test_wilson_interval_contains_the_rate(trials: int, data) -> None:
    failures = data.draw(st.integers(0, trials))
    lo, hi = wilson_interval(failures, trials)
    assert 0.0 <= lo <= failures / trials <= hi <= 1.0


def test_wilson_known_value() -> None:
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)


def test_quick_sweep_visits_switch_points_and_neighbours() -> None:
    s = batch_sweep("quick")
    for n in (1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65):
        assert n in s
    assert max(s) == 65


def test_quick_sweep_has_the_capture_ladders_of_vllm_and_sglang() -> None:
    s = batch_sweep("quick")
    for n in (5, 23, 24, 25, 39, 40, 41, 47, 48, 49, 55, 56, 57):  # 24, 40, 48, 56 are capture sizes
        assert n in s


def test_full_sweep_has_every_size_to_512_then_powers_of_two_to_8192() -> None:
    s = batch_sweep("full")
    assert s[:512] == list(range(1, 513))
    for n in (6, 10, 11, 12, 13, 14, 40, 48, 96, 1023, 1024, 1025, 2047, 2048, 2049, 8191, 8192):
        assert n in s
    assert max(s) == 8192 and s == sorted(set(s))


def test_limit_caps_and_extends_a_profile() -> None:
    assert max(batch_sweep("full", limit=100)) == 100 and len(batch_sweep("full", limit=100)) == 100
    extended = batch_sweep("quick", limit=300)
    assert {127, 128, 129, 255, 256, 257, 104, 160, 168} <= set(extended) and max(extended) <= 300
    assert batch_sweep("exhaustive", limit=40) == list(range(1, 41))
    assert batch_sweep("exhaustive") == list(range(1, 513))


def test_sweep_limit_and_unknown_profile() -> None:
    with pytest.raises(ValueError, match="unknown profile"):
        batch_sweep("medium")
    with pytest.raises(ValueError, match="limit"):
        batch_sweep("quick", limit=0)


@pytest.mark.parametrize(
    "n, expected", [(1, [0]), (2, [0, 1]), (5, [0, 1, 2, 3, 4]), (64, [0, 1, 32, 62, 63])]
)
def test_probe_positions(n: int, expected: list[int]) -> None:
    assert probe_positions(n) == expected


def test_equivalence_classes_and_their_format() -> None:
    outs = {1: "a", 2: "b", 3: "b", 4: "b", 8: "c", 16: "c", 32: "b"}
    classes = equivalence_classes(outs)
    assert classes == [[1], [2, 3, 4, 32], [8, 16]]
    assert format_classes(classes) == "{1} {2..4,32} {8..16}"


def test_classes_travel_as_ranges_and_read_back_from_old_text() -> None:
    from pytest_invariance.oracles.classes import check_ranges, class_ranges, format_ranges, parse_ranges

    ranges = class_ranges([[1], [2, 3, 4, 32], [8, 16]])
    assert ranges == [[[1, 1]], [[2, 4], [32, 32]], [[8, 16]]]  # runs over the *tested* sizes
    assert format_ranges(ranges) == "{1} {2..4,32} {8..16}"
    assert parse_ranges(format_ranges(ranges)) == ranges  # records written as text read back as data
    assert check_ranges("{1} {2..4,32} {8..16}") == ranges
    with pytest.raises(ValueError, match="spans"):
        check_ranges([[[4, 2]]])


def test_bits_key_groups_exact_bits_only() -> None:
    from pytest_invariance.oracles.compare import BitsKey

    a = torch.tensor([1.0, 2.0])
    same = torch.tensor([1.0, 2.0])
    swapped = torch.tensor([2.0, 1.0])  # same digest (sum of bits), different bits
    neg_zero = torch.tensor([-0.0]), torch.tensor([0.0])
    assert BitsKey(a) == BitsKey(same) and hash(BitsKey(a)) == hash(BitsKey(same))
    assert hash(BitsKey(a)) == hash(BitsKey(swapped))
    assert BitsKey(a) != BitsKey(swapped)
    assert BitsKey(neg_zero[0]) != BitsKey(neg_zero[1])
    assert len({BitsKey(a), BitsKey(same), BitsKey(swapped)}) == 2


def test_compare_on_equal_bits_skips_host_copy_and_reports_equal() -> None:
    a = torch.tensor([float("nan"), 1.0])
    c = compare(a, a.clone())
    assert c.equal and c.bitwise_equal and c.n_diff == 0 and c.numel == 2
