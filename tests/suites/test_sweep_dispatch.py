"""Sweeps send a batch as one list request by default, and record the engine steps it really ran.

Against the real bundled server (in this process's thread, tiny model): a list request of N prompts
decodes in steps of exactly N sequences, which ``/metrics`` proves; ``independent`` dispatch stays
available and says so in the shape.
"""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from pytest_invariance.adapters.bundled import BundledAdapter, parse_steps_by_batch  # noqa: E402
from pytest_invariance.e2e import Target, sweep_single  # noqa: E402
from pytest_invariance.engine.config import EngineConfig, ModelConfig  # noqa: E402
from pytest_invariance.engine.server import ServerThread, create_app  # noqa: E402

TINY = ModelConfig(hidden=64, layers=1, heads=4, kv_heads=2, head_dim=16, intermediate=128)


@pytest.fixture(scope="module")
def base():
    with ServerThread(create_app(EngineConfig(model=TINY, batch_invariant=True))) as url:
        yield url


def test_metrics_count_steps_by_exact_batch_size():
    text = (
        'invariance_engine_steps_by_batch_size_total{batch_size="1"} 3\n'
        'invariance_engine_steps_by_batch_size_total{batch_size="16"} 47\n'
        "invariance_engine_steps_total 50\n"
    )
    assert parse_steps_by_batch(text) == {1: 3, 16: 47}


def test_single_sweep_sends_one_list_request_per_level_and_proves_co_batching(base):
    t = Target(BundledAdapter(base), "target", "invariant")
    t.refresh()
    out = sweep_single(t, "quick", 0)
    assert out.shape["dispatch"] == "list" and "jitter_ms" not in out.shape
    sizes = out.evidence["step_batch_sizes"]
    assert set(sizes) == {"1", "2", "4", "8", "16", "64"}  # no ladder on CPU; the wide batch at max_num_seqs
    for n, steps in sizes.items():
        # every decode step of the level ran all of its prompts together
        assert max(int(bs) for bs in steps) == int(n), (n, steps)
    assert out.evidence["max_step_batch"]["16"] == 16


def test_independent_dispatch_is_recorded_with_its_jitter(base):
    t = Target(BundledAdapter(base), "target", "invariant", dispatch="independent")
    t.refresh()
    out = sweep_single(t, "quick", 0)
    assert out.shape["dispatch"] == "independent" and out.shape["jitter_ms"] == [10.0, 30.0]


def test_unknown_dispatch_is_refused():
    with pytest.raises(ValueError, match="dispatch"):
        Target(BundledAdapter("http://127.0.0.1:9"), "target", "invariant", dispatch="burst")
