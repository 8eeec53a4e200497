"""Batch-size sweeps cross every capture-ladder edge: the target's own ladder where it reports one
(bundled, SGLang, vLLM style), else the vLLM and SGLang defaults; the padding fake diverges there,
its clean twin does not, and the classes show the bucket edges."""

from __future__ import annotations

import pytest

from pytest_invariance.adapters import make_adapter
from pytest_invariance.e2e import Target
from pytest_invariance.e2e.concurrency_sweeps import levels, sweep_mixed, sweep_single
from pytest_invariance.e2e.ladder import DEFAULT_SOURCE, crossing_levels, target_ladder
from pytest_invariance.e2e.target import SweepOptions
from pytest_invariance.fakes import FakeEngine

LADDER = (1, 2, 4, 8, 12, 16)


def _target(fake: FakeEngine, engine: str, **kw) -> Target:
    t = Target(make_adapter(engine, fake.url), "target", "invariant",
               options=SweepOptions(prompts="text" if engine == "openai" else "ids", probe_tokens=40, **kw))  # fmt: skip
    t.refresh()
    return t


def test_default_union_adds_each_edge_minus_one_edge_plus_one_up_to_the_limit():
    union = target_ladder(None)
    assert union.source == DEFAULT_SOURCE
    assert crossing_levels([1, 2, 4, 8, 16], union) == [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17]
    assert crossing_levels([1, 4, 8], union) == [1, 2, 3, 4, 5, 7, 8, 9]
    full = crossing_levels([1, 2, 4, 8, 16, 32, 64, 128], union)
    assert {23, 24, 25, 127, 128, 129} <= set(full) and max(full) == 129


def test_an_empty_reported_ladder_adds_nothing():
    ladder = target_ladder({"cuda_graph_buckets": []})
    assert crossing_levels([1, 2, 4, 8, 16], ladder) == [1, 2, 4, 8, 16] and "no padding" in ladder.source


@pytest.mark.parametrize("engine,style", [("bundled", "bundled"), ("sglang", "sglang"), ("vllm", "vllm")])
def test_the_targets_reported_ladder_is_used(engine, style):
    with FakeEngine("none", report_ladder=style, ladder=LADDER) as fake:
        t = _target(fake, engine)
    assert target_ladder(t.info).sizes == LADDER and "reported by the target" in target_ladder(t.info).source
    assert levels("quick", t) == [1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 15, 16, 17, 65]
    assert levels("quick", t, "mixed") == [1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 15, 16, 17]  # no wide batch


def test_explicit_levels_win():
    with FakeEngine("none") as fake:
        t = _target(fake, "openai", levels=(1, 6))
    assert levels("quick", t) == [1, 6] and levels("quick", t, "mixed") == [1, 6]


def test_padding_fake_diverges_off_the_ladder_and_classes_show_the_buckets():
    with FakeEngine("padding", report_ladder="none") as fake:
        out = sweep_single(_target(fake, "openai"), "quick", 0)
    assert out.diverged is True, out.summary
    assert out.evidence["equivalence_classes"] == [[[1, 2], [4, 4], [8, 8], [16, 16]], [[3, 3]], [[5, 7]],
                                                   [[9, 15]], [[17, 17]], [[65, 65]]]  # fmt: skip
    assert "classes {1..2,4,8,16} {3} {5..7} {9..15} {17} {65}" in out.summary  # 65 pads to 72
    assert out.evidence["ladder"]["edges"] == [1, 2, 4, 8, 16]  # edges crossed: the wide batch crosses none
    assert "bucket edges 1,2,4,8,16" in out.summary and out.evidence["ladder"]["source"] == DEFAULT_SOURCE


def test_padding_fake_diverges_in_mixed_with_its_reported_ladder_and_the_clean_twin_does_not():
    for bug, diverged in (("padding", True), ("none", False)):
        with FakeEngine(bug, report_ladder="vllm", ladder=LADDER) as fake:
            out = sweep_mixed(_target(fake, "vllm", neighbour_tokens=(5, 30)), "quick", 0)
        assert out.diverged is diverged, (bug, out.summary)
        assert "cudagraph_capture_sizes reported by the target" in out.summary


def test_single_reaches_the_wide_batch_where_a_switch_above_the_crossings_shows():
    """A kernel switch at 48 rows (no ladder edge, above the quick crossings to 17) shows only at the
    quick profile's wide batch of 65: one more list request, in its own class."""
    with FakeEngine("large-batch", report_ladder="none") as fake:
        out = sweep_single(_target(fake, "openai"), "quick", 0)
    assert out.diverged is True, out.summary
    assert out.evidence["equivalence_classes"][-1] == [[65, 65]] and len(out.evidence["equivalence_classes"]) == 2


def test_the_wide_batch_stays_within_the_targets_max_num_seqs():
    with FakeEngine("none", report_ladder="bundled", max_num_seqs=40) as fake:
        t = _target(fake, "bundled")
    assert levels("quick", t)[-2:] == [17, 40] and levels("full", t)[-1] == 129  # full crosses to 129 itself
