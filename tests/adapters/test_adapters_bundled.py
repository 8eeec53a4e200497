"""Adapters against the real bundled engine (a subprocess in invariant mode): every flavour returns
the same token ids, list-batched equals independent requests, prompt logprobs come back."""

from __future__ import annotations

import pytest

from pytest_invariance.adapters import GenParams, make_adapter
from pytest_invariance.adapters.bundled import BundledEngine, missing_engine_deps

pytestmark = pytest.mark.skipif(
    bool(missing_engine_deps()), reason="the bundled engine needs fastapi and uvicorn"
)
PROMPT = "The quick brown fox"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    eng = BundledEngine(invariant=True, log_dir=tmp_path_factory.mktemp("eng"))
    eng.start()
    yield eng
    eng.stop()


def test_mode_and_every_flavour_agrees(engine):
    base = engine.adapter
    info = base.server_info()
    assert base.mode(info) == "invariant" and info["engine"] == "bundled"
    params = GenParams(max_tokens=8, logprobs=2)
    ref = base.generate([PROMPT], params)[0]
    assert len(ref.token_ids) == 8 and len(ref.logprobs) == 8 and len(ref.top_logprobs[0]) == 2
    for flavour in ("vllm", "sglang", "openai"):
        got = make_adapter(flavour, engine.base_url).generate([PROMPT], params)[0]
        assert got.token_ids == ref.token_ids, flavour
        assert got.logprobs == ref.logprobs, flavour  # bitwise: same float64 parsed from the same JSON text
    assert make_adapter("sglang", engine.base_url).mode(info) == "invariant"


def test_list_batched_equals_independent_in_invariant_mode(engine):
    params = GenParams(max_tokens=6)
    prompts = [PROMPT, "hello", "a much longer prompt " * 4]
    for flavour in ("bundled", "sglang"):
        a = make_adapter(flavour, engine.base_url)
        listed = a.generate(prompts, params, dispatch="list")
        indep = a.generate(prompts, params, jitter_ms=(5, 15), seed=1)
        assert [c.token_ids for c in listed] == [c.token_ids for c in indep], flavour


def test_prompt_logprobs_match_across_flavours(engine):
    params = GenParams(max_tokens=1, prompt_logprobs=0)
    ids = engine.adapter.generate([PROMPT], GenParams(max_tokens=1))[0].prompt_token_ids
    v = make_adapter("vllm", engine.base_url).generate([ids], params)[0]
    s = make_adapter("sglang", engine.base_url).generate([ids], params)[0]
    o = make_adapter("openai", engine.base_url).generate([ids], params)[0]
    assert v.prompt_logprobs[0] is None and len(v.prompt_logprobs) == len(ids)
    assert v.prompt_logprobs == s.prompt_logprobs == o.prompt_logprobs


def test_stop_ends_the_process_and_keeps_the_log(tmp_path):
    eng = BundledEngine(invariant=False, log_dir=tmp_path, extra_args=["--max-num-seqs", "2"])
    a = eng.start()
    assert a.mode(a.server_info()) == "default" and a.health()
    proc = eng.proc
    eng.stop()
    assert proc.poll() is not None and eng.log_path.exists() and not a.health()


def test_engine_that_cannot_start_fails_with_its_log(tmp_path):
    eng = BundledEngine(
        invariant=False, log_dir=tmp_path, extra_args=["--max-num-seqs", "0"], startup_timeout_s=60
    )
    with pytest.raises(RuntimeError, match="exited with status 2 before it was healthy: .*max-num-seqs"):
        eng.start()
