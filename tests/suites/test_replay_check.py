"""The replay check: one seeded concurrent workload replayed K times; the clean fake is bitwise
equal in every replay, the replay fake is not, and the record says which requests changed."""

from __future__ import annotations

import pytest

from pytest_invariance.adapters import make_adapter
from pytest_invariance.e2e import Target
from pytest_invariance.e2e.replay import judge_replays, sweep_replay, workload
from pytest_invariance.e2e.target import SweepOptions
from pytest_invariance.fakes import FakeEngine


def _target(fake: FakeEngine, replays: int = 3) -> Target:
    """Through the bundled adapter: it reads the fake's per-step batch sizes, as the bundled engine's."""
    t = Target(make_adapter("bundled", fake.url), "target", "invariant",
               options=SweepOptions(prompts="ids", replays=replays))  # fmt: skip
    t.refresh()
    return t


def test_workload_is_distinct_spread_staggered_and_half_streamed():
    with FakeEngine("none") as fake:
        t = _target(fake)
        work = workload(t, "quick", 0)
    assert len(work) == 32 and len({tuple(r.prompt) for r in work}) == 32
    assert min(len(r.prompt) for r in work) <= 6 and max(len(r.prompt) for r in work) >= 200
    assert all(b.offset_s >= a.offset_s for a, b in zip(work, work[1:], strict=False)) and work[-1].offset_s > 0.05
    assert sum(r.stream for r in work) == 16 and len({r.max_tokens for r in work}) > 3
    assert len(workload(t, "full", 0)) == 64 and workload(t, "quick", 0) == work  # seeded


def test_clean_fake_replays_bitwise():
    with FakeEngine("none", report_ladder="bundled") as fake:
        out = sweep_replay(_target(fake), "quick", 0)
    assert out.diverged is False and out.evidence["failures"] == 0 and out.evidence["trials"] == 3, out.summary
    assert "0/3 replays differ" in out.summary and out.evidence["max_step_batch"]  # the requests did co-run


def test_replay_fake_is_caught_and_the_changed_requests_are_named():
    with FakeEngine("replay", replay_rate=0.5) as fake:
        out = sweep_replay(_target(fake), "quick", 0)
    assert out.diverged is True, out.summary
    changed = out.evidence["changed_requests"]
    assert changed and out.evidence["failures"] >= 1 and "requests changed: #" in out.summary
    assert changed[0]["first_difference"]["replay"] >= 2 and "step" in changed[0]["first_difference"]


def test_requests_that_never_shared_a_step_make_equality_blind():
    with FakeEngine("none") as fake:
        t = _target(fake, replays=2)
        work = workload(t, "quick", 0)[:2]
        runs = [[t.adapter.generate_one(r.prompt, _params(r)) for r in work] for _ in range(2)]
    out = judge_replays(t, work, runs, {"streamed": 0}, {"replay 1": {1: 9}, "replay 2": {1: 9}})
    assert out.diverged is False and out.blind and "never shared" in out.blind


def _params(r):
    from pytest_invariance.adapters import GenParams

    return GenParams(max_tokens=r.max_tokens, logprobs=0)


def test_fewer_than_two_replays_is_refused():
    with pytest.raises(ValueError, match="replays must be at least 2"):
        SweepOptions(replays=1)
