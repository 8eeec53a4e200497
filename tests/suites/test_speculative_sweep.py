"""The speculative sweep cannot pass by accident: a speculative target that never accepted a draft,
or one that does not report its acceptance, makes equality `vacuous`, never a pass.

Against the real bundled server (in-process thread, tiny model)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from pytest_invariance.adapters.bundled import BundledAdapter  # noqa: E402
from pytest_invariance.e2e import Target  # noqa: E402
from pytest_invariance.e2e.checks import observation  # noqa: E402
from pytest_invariance.e2e.speculative import speculative_sweep  # noqa: E402
from pytest_invariance.engine.config import EngineConfig, ModelConfig  # noqa: E402
from pytest_invariance.engine.server import ServerThread, create_app  # noqa: E402
from pytest_invariance.judge import Control, Observation, decide  # noqa: E402

TINY = ModelConfig(hidden=64, layers=1, heads=4, kv_heads=2, head_dim=16, intermediate=128)
DIVERGED = Control("a control that diverged", Observation(True, {}))


class NoStats(BundledAdapter):
    """A speculative server that does not report its acceptance counters."""

    def server_info(self) -> dict | None:
        info = super().server_info()
        return info and {k: v for k, v in info.items() if k != "speculative_stats"}


def _target(adapter: BundledAdapter) -> Target:
    t = Target(adapter, "target", "invariant")
    t.refresh()
    return t


@pytest.fixture(scope="module")
def urls():
    with (
        ServerThread(create_app(EngineConfig(model=TINY, batch_invariant=True))) as plain,
        ServerThread(
            create_app(EngineConfig(model=TINY, batch_invariant=True, speculative="ngram:3"))
        ) as spec,
    ):
        yield plain, spec


def test_plain_paired_with_plain_is_vacuous(urls):
    plain = _target(BundledAdapter(urls[0]))
    out = speculative_sweep(plain, plain, "quick", 0)
    assert out.diverged is False and out.evidence["acceptance"]["accepted_tokens"] == 0
    assert "no draft was accepted" in out.blind
    assert decide(observation(plain, out), DIVERGED) == "vacuous"


def test_speculative_pair_is_invariant_only_with_acceptance_reported(urls):
    plain = _target(BundledAdapter(urls[0]))
    out = speculative_sweep(plain, _target(BundledAdapter(urls[1])), "quick", 0)
    assert out.diverged is False and out.blind is None, out.summary
    assert out.evidence["acceptance"]["accepted_tokens"] > 0
    assert decide(observation(plain, out), DIVERGED) == "invariant"
    hidden = speculative_sweep(plain, _target(NoStats(urls[1])), "quick", 1)
    assert "acceptance not proven" in hidden.blind
    assert decide(observation(plain, hidden), DIVERGED) == "vacuous"
