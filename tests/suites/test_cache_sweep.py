"""The cache sweep cannot pass by accident: a fresh nonce makes the cold request cold on every run,
the engine's own counts must prove cold = 0 and warm > 0, and without counts the verdict is vacuous.

Against the real bundled server (in-process thread, tiny model, prefix cache on)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
requests = pytest.importorskip("requests")

from pytest_invariance.adapters.bundled import BundledAdapter  # noqa: E402
from pytest_invariance.e2e import Target  # noqa: E402
from pytest_invariance.e2e.checks import observation  # noqa: E402
from pytest_invariance.e2e.sweeps import sweep_cache  # noqa: E402
from pytest_invariance.engine.config import EngineConfig, ModelConfig  # noqa: E402
from pytest_invariance.engine.server import ServerThread, create_app  # noqa: E402
from pytest_invariance.judge import Control, Observation, decide  # noqa: E402

TINY = ModelConfig(hidden=64, layers=1, heads=4, kv_heads=2, head_dim=16, intermediate=128)


@pytest.fixture(scope="module")
def base():
    cfg = EngineConfig(model=TINY, batch_invariant=True, enable_prefix_cache=True)
    with ServerThread(create_app(cfg)) as url:
        yield url


class NoFlush(BundledAdapter):
    """A server that cannot flush its cache (as an OpenAI endpoint)."""

    def flush_cache(self) -> bool:
        return False


class NoCounts(NoFlush):
    """...and reports no cached tokens either."""

    def generate_one(self, prompt, params):
        c = super().generate_one(prompt, params)
        c.cached_tokens = None
        return c


def _target(adapter) -> Target:
    t = Target(adapter, "target", "invariant")
    t.refresh()
    return t


def test_bundled_server_reports_cached_tokens_in_both_apis(base):
    body = {"model": "x", "prompt": "cache me " * 8, "max_tokens": 2, "temperature": 0}
    cold = requests.post(base + "/v1/completions", json=body, timeout=60).json()
    warm = requests.post(base + "/v1/completions", json=body, timeout=60).json()
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    gen = {"text": "cache me " * 8, "sampling_params": {"max_new_tokens": 2, "temperature": 0}}
    assert requests.post(base + "/generate", json=gen, timeout=60).json()["meta_info"]["cached_tokens"] > 0


def test_a_second_run_without_a_flush_is_cold_again(base):
    t = _target(NoFlush(base))
    for _ in range(2):
        out = sweep_cache(t, "quick", 0)
        assert out.evidence["flushed"] is False
        assert out.evidence["cold_cached_tokens"] == 0 and out.evidence["warm_cached_tokens"] > 0
        assert out.blind is None and out.evidence["cache_hit"].startswith("proven")
    control = Control("c", Observation(True, {}))
    assert decide(observation(t, out), control) == "invariant"


def test_without_cached_token_counts_equality_is_vacuous(base):
    t = _target(NoCounts(base))
    out = sweep_cache(t, "quick", 0)
    assert out.diverged is False and out.blind.startswith("cache hit not proven")
    # even beside a control that diverged, an unproven hit is not a pass
    assert decide(observation(t, out), Control("c", Observation(True, {}))) == "vacuous"
