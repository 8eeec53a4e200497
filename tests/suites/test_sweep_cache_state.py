"""A sweep's verdict does not depend on what the server served before it: each sweep, and each
replay, starts from an empty prefix cache where the server can empty it.

Measured on vLLM CPU 0.32 (``reports/cpu/logs/vllm_single_sweep_cache_history.log``): on a fresh
server the single and prefix sweeps were divergent (the first request cold, the rest served from
the cache), run again on the same server vacuous, after ``/reset_prefix_cache`` divergent again.
The ``warm-cache`` fake (a cache hit resumes from other bits) behaves the same way, so it stands in
for vLLM here; the clean twin shows that the flush itself changes nothing.
"""

from __future__ import annotations

from pytest_invariance.adapters import make_adapter
from pytest_invariance.e2e import Target
from pytest_invariance.e2e import sweeps as W
from pytest_invariance.e2e.target import SweepOptions
from pytest_invariance.fakes import FakeEngine


def _target(url: str, replays: int = 5) -> Target:
    t = Target(make_adapter("vllm", url), "control", "default",
               options=SweepOptions(prompts="ids", evidence="logprobs", replays=replays))  # fmt: skip
    t.refresh()
    return t


def test_single_and_prefix_sweeps_see_the_same_on_a_warm_server():
    with FakeEngine("warm-cache", report_ladder="vllm") as fake:
        t = _target(fake.url)
        for name in ("single", "prefix"):
            first, again = (W.run_cached(t, name, "quick", seed) for seed in (0, 1))  # two runs, one server
            assert first.diverged is True and again.diverged is True, (first.summary, again.summary)
            assert first.evidence["cache_flushed"] is True and again.evidence["cache_flushed"] is True


def test_replays_start_from_one_cache_state_so_a_cache_hit_is_not_run_to_run():
    with FakeEngine("warm-cache", report_ladder="vllm") as fake:
        out = W.sweep_replay(_target(fake.url, replays=3), "quick", 0)
    assert out.diverged is False, out.summary  # without the flush: replay 1 cold, 2 and 3 warm, divergent
    assert out.evidence["cache_flushed"] is True


def test_the_flush_is_recorded_as_not_done_where_the_server_cannot():
    with FakeEngine("none", report_ladder="none") as fake:
        t = Target(make_adapter("openai", fake.url), "target", "invariant",
                   options=SweepOptions(prompts="ids", evidence="logprobs"))  # fmt: skip
        t.refresh()
        out = W.run_cached(t, "single", "quick", 0)
    assert out.diverged is False and out.evidence["cache_flushed"] is False
