"""Sequence analysis: unique completions, first divergence, margins, classes, step comparison."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pytest_invariance.oracles import sequences as S
from pytest_invariance.oracles.classes import format_ranges


def test_first_divergence():
    assert S.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert S.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert S.first_divergence([1, 2], [1, 2, 3]) == 2


@given(st.lists(st.integers(0, 3), max_size=6), st.lists(st.integers(0, 3), max_size=6))
def test_first_divergence_is_symmetric_and_prefix_equal(a, b):
    d = S.first_divergence(a, b)
    assert d == S.first_divergence(b, a)
    if d is None:
        assert a == b
    else:
        assert a[:d] == b[:d] and (d == min(len(a), len(b)) or a[d] != b[d])


def test_unique_and_histogram():
    seqs = [[1, 2, 3]] * 3 + [[1, 2, 4], [1, 9, 9]]
    assert S.unique_completions(seqs) == (3, 3)
    # pairs differing: 3 copies x [1,2,4] at 2 (3), 3 copies x [1,9,9] at 1 (3), [1,2,4] vs [1,9,9] at 1
    assert S.divergence_histogram(seqs) == {1: 4, 2: 3}


def test_margin_classes_use_declared_thresholds():
    assert S.classify_margin(0.0) == S.TIE
    assert S.classify_margin(S.NEAR_TIE_NATS / 2) == S.NEAR_TIE
    assert S.classify_margin(S.NEAR_TIE_NATS) == S.CONFIDENT
    assert S.classify_margin(None) is None
    assert S.top_margin([(5, -1.0), (6, -1.25)]) == 0.25
    assert S.top_margin([(5, -1.0)]) is None


def test_analyze_levels_classes_and_margin():
    a, b = [1, 2, 3, 4], [1, 2, 7, 4]
    top = [[(1, -0.1), (0, -3.0)], [(2, -0.1), (0, -4.0)], [(3, -0.70), (7, -0.72)], [(4, -0.1), (0, -5.0)]]
    an = S.analyze({1: [a], 2: [a, a], 4: [a, b, a, a], 8: [b] * 8}, reference_top=top)
    assert (an.samples, an.unique, an.most_common) == (15, 2, 9)
    assert an.first_divergence == 2 and an.margin_class == S.NEAR_TIE and an.first_level == 4
    assert an.classes == [[[1, 2]], [[4, 4]], [[8, 8]]]
    assert format_ranges(an.classes) == "{1..2} {4} {8}"
    ev = an.evidence()
    assert ev["concurrency"] == [1, 2, 4, 8] and ev["points"][2] == {"concurrency": 4, "unique": 2}
    assert ev["first"]["batch_size"] == 4 and ev["first"]["token_index"] == 2
    assert "15 samples, 2 unique, first divergence at token 2 (near-tie)" in an.describe()


def test_analyze_invariant():
    an = S.analyze({1: [[5, 6]], 16: [[5, 6]] * 16})
    assert not an.diverged and an.unique == 1 and an.first_divergence is None and an.evidence()["first"] == {}


def test_step_difference_is_bitwise():
    assert S.step_difference([1, 2], [-0.5, -1.0], [1, 2], [-0.5, -1.0]) is None
    d = S.step_difference([1, 2], [-0.5, -1.0], [1, 2], [-0.5, -1.0000000000000002])
    assert d["step"] == 1 and d["what"] == "logprob" and d["abs_diff"] > 0
    assert S.step_difference([1, 2], [0.0, 0.0], [1, 2], [0.0, -0.0])["what"] == "logprob"
    assert S.step_difference([1, 2], None, [1, 3], None)["what"] == "token"
    assert S.step_difference([1], None, [1, 3], None) == {
        "step": 1,
        "what": "length",
        "ref": 1,
        "got": 2,
        "abs_diff": None,
    }


def test_uncomparable_logprob_steps_are_differences_not_skipped() -> None:
    """A rescoring that returns fewer logprobs, or logprobs on one side only, must not pass as equal."""
    short = S.step_difference([1, 2, 3], [-0.5, -1.0, -2.0], [1, 2, 3], [-0.5, -1.0])
    assert short["what"] == "logprob-length" and short["step"] == 2
    one_sided = S.step_difference([1, 2], [-0.5, -1.0], [1, 2], None)
    assert one_sided["what"] == "logprob-missing"
