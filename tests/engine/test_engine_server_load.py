"""Load and batching through HTTP: overload loses nothing, bursts really batch, and the mode decides
whether a burst of one greedy prompt comes back as one completion or several."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")
requests = pytest.importorskip("requests")

from pytest_invariance.engine.config import EngineConfig, ModelConfig  # noqa: E402
from pytest_invariance.engine.server import ServerThread, create_app  # noqa: E402

TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, dtype="float32")


def metrics(base: str) -> dict[str, float]:
    out = {}
    for line in requests.get(base + "/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_thousand_concurrent_requests_none_lost() -> None:
    """1,000 clients at once against 32 running + 32 queued: the rest get 503 + Retry-After and
    retry (the openai client honours retry-after-ms); every request completes exactly once."""
    cfg = EngineConfig(model=ModelConfig(**{**TINY, "layers": 1}, max_position=128), max_num_seqs=32)
    app = create_app(cfg, max_queue=32, retry_after_s=0.2)
    with ServerThread(app) as base:

        async def burst() -> list:
            async with openai.AsyncOpenAI(
                base_url=base + "/v1", api_key="x", max_retries=1000, timeout=120
            ) as c:

                async def one(i: int):
                    r = await c.completions.create(
                        model="x", prompt=[i % 256, 7], max_tokens=1, temperature=0
                    )
                    return i, r

                return await asyncio.gather(*(one(i) for i in range(1000)))

        results = asyncio.run(burst())
        assert len(results) == 1000
        for i, r in results:
            c = r.choices[0]
            assert c.model_extra["prompt_token_ids"] == [i % 256, 7]
            assert len(c.model_extra["token_ids"]) == 1
        m = metrics(base)
        assert m['invariance_engine_requests_total{outcome="accepted"}'] == 1000
        assert m['invariance_engine_requests_total{outcome="finished"}'] == 1000
        assert m['invariance_engine_requests_total{outcome="rejected_overload"}'] > 0, (
            "overload never happened"
        )
        assert m["invariance_engine_inflight"] == 0
        assert m["invariance_engine_batch_size_max"] > 1
        assert m["invariance_engine_batch_size_max"] <= 32


PROMPTS = ["The quick brown fox", "Once upon a time, in a land far away, there lived a"]


def distinct_completions(base: str, prompt: str, concurrency: int, max_tokens: int, stagger_s: float) -> int:
    """Same greedy prompt from ``concurrency`` clients, arrivals staggered so that each request meets
    a different mix of prefills and decodes (what continuous batching does to real traffic)."""

    async def burst() -> set:
        async with openai.AsyncOpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=300) as c:

            async def one(i: int) -> tuple:
                await asyncio.sleep(i * stagger_s)
                r = await c.completions.create(
                    model="x", prompt=prompt, max_tokens=max_tokens, temperature=0, logprobs=0
                )
                choice = r.choices[0]
                # token ids and the bits of every token's logprob: equal text from other arithmetic
                # still counts as a different completion under the bitwise contract
                return tuple(choice.model_extra["token_ids"]), tuple(choice.logprobs.token_logprobs)

            return set(await asyncio.gather(*(one(i) for i in range(concurrency))))

    return len(asyncio.run(burst()))


def _burst_counts(batch_invariant: bool) -> tuple[list[int], float]:
    app = create_app(EngineConfig(batch_invariant=batch_invariant), max_queue=64)
    with ServerThread(app) as base:
        counts = [distinct_completions(base, p, 16, 24, 0.02) for p in PROMPTS]
        return counts, metrics(base)["invariance_engine_batch_size_max"]


def test_demo_model_burst_identical_in_invariant_mode_only() -> None:
    """Same bursts through HTTP in both modes, through the official ``openai`` client. Default mode is
    the positive control: its designed mechanisms (split-K at M <= 8, one pass above; split-KV
    by batch) give a request that met a different batch other logprob bits on any host, so at
    least one prompt's burst has more than one distinct completion. Without that divergence the
    invariant result would be vacuous."""
    control, control_batch = _burst_counts(False)
    assert control_batch > 1, "the default-mode burst was never batched"
    assert max(control) > 1, f"default mode gave one completion per prompt {control}: control did not diverge"
    counts, max_batch = _burst_counts(True)
    assert max_batch > 1, "the invariant-mode burst was never batched"
    assert counts == [1] * len(PROMPTS), f"distinct completions per prompt: {counts}"
