"""The sweeps' shape is a parameter: probe/neighbour lengths, id or text prompts, and the evidence
compared (logprob bits, token ids, or text), named in every summary.

Against the real bundled server (in-process, tiny model, default mode so the sweep has something
to see): a sweep in ``text`` evidence mode still finds the default engine's batch dependence, and
says that its verdict rests on text; ``tokens`` mode sends no logprobs; a long id probe is sent as
ids of exactly that length; the logprob-only sweeps are ``unsupported`` without logprobs.
"""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from pytest_invariance.adapters.bundled import BundledAdapter  # noqa: E402
from pytest_invariance.e2e import Target  # noqa: E402
from pytest_invariance.e2e import sweeps as W  # noqa: E402
from pytest_invariance.e2e.target import SweepOptions  # noqa: E402
from pytest_invariance.engine.config import EngineConfig, ModelConfig  # noqa: E402
from pytest_invariance.engine.server import ServerThread, create_app  # noqa: E402

TINY = ModelConfig(hidden=64, layers=1, heads=4, kv_heads=2, head_dim=16, intermediate=128)


@pytest.fixture(scope="module")
def base():
    with ServerThread(create_app(EngineConfig(model=TINY, batch_invariant=False))) as url:
        yield url


@pytest.fixture(scope="module")
def demo():
    """The demo model (its default mode flips tokens within 48 steps; the tiny one does not)."""
    with ServerThread(create_app(EngineConfig(batch_invariant=False))) as url:
        yield url


def _target(base: str, **kw) -> Target:
    t = Target(BundledAdapter(base), "control", "default", options=SweepOptions(**kw))
    t.refresh()
    return t


def test_text_evidence_sees_the_default_engine_and_says_so(demo):
    t = _target(demo, evidence="text", prompts="text")
    out = W.run_cached(t, "single", "quick", 0)
    assert out.diverged is True, out.summary
    assert out.summary.endswith("[compared: text (UTF-8 bytes)]")
    assert out.shape["compared"] == "text (UTF-8 bytes)" and out.shape["prompts"] == "text"
    assert "bitwise_differing_samples" not in out.evidence  # no logprob bits were compared


def test_token_evidence_requests_no_logprobs(base):
    t = _target(base, evidence="tokens")
    assert W.gen(t, 8).logprobs is None
    out = W.sweep_mixed(t, "quick", 0)
    assert out.error is None and "bitwise_differing_samples" not in out.evidence


@pytest.mark.parametrize("name", ["logprobs", "prefill-decode"])
def test_logprob_sweeps_are_unsupported_without_logprobs(base, name):
    out = W.SWEEPS[name][0](_target(base, evidence="text", prompts="text"), "quick", 0)
    assert out.unsupported and "compares logprobs" in out.unsupported


def test_long_id_probe_and_neighbours_have_the_requested_lengths(base):
    t = _target(base, probe_tokens=33, neighbour_tokens=(5, 17))
    p = W.probe(t)
    assert isinstance(p, list) and len(p) == 33
    assert [len(W.other(t, i, 99)) for i in range(3)] == [5, 17, 5]
    c = t.adapter.generate([p], W.gen(t, 2))[0]
    assert c.prompt_token_ids is None or len(c.prompt_token_ids) >= 33


def test_text_prompts_are_words_and_prefix_lengths_are_taken_as_given(base):
    t = _target(base, prompts="text", probe_tokens=9, prefix_lengths=(3, 5))
    assert isinstance(W.probe(t), str) and len(W.probe(t).split()) == 9
    out = W.sweep_prefix(t, "quick", 0)
    assert out.shape["prefix_lengths"] == [3, 5] and out.error is None


def test_concurrency_levels_are_taken_as_given(base):
    t = _target(base, levels=(5, 1, 3, 3))
    assert W.sweep_single(t, "quick", 0).shape["levels"] == [1, 3, 5]
    assert W.sweep_mixed(t, "quick", 0).shape["levels"] == [1, 3, 5]


@pytest.mark.parametrize("bad", [{"prompts": "bytes"}, {"evidence": "vibes"}, {"probe_tokens": 0},
                                 {"prefix_lengths": ()}, {"neighbour_tokens": (4, 0)}, {"levels": (0,)},
                                 {"levels": (8, 8)}])  # fmt: skip
def test_bad_options_are_refused_with_the_name(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SweepOptions(**bad)
