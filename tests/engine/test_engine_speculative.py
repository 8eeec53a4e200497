"""Speculative decoding (prompt-lookup drafts): drafting, acceptance, KV rollback, and the claim
that in invariant mode speculative decoding equals plain decoding bit for bit."""

from __future__ import annotations

import struct

import pytest

from pytest_invariance.engine.config import EngineConfig, ModelConfig
from pytest_invariance.engine.llm import LLM
from pytest_invariance.engine.sampler import SamplingParams
from pytest_invariance.engine.speculative import accepted_tokens, parse_speculative, propose_ngram

# bf16 and an LM head with a shared direction, as the demo model: near-tied logits, so a kernel-path
# difference shows as a token flip; small enough for seconds on 2 cores.
SMALL = dict(hidden=128, layers=2, heads=4, kv_heads=2, head_dim=32, intermediate=256, max_position=512,
             lm_head_shared=30.0)  # fmt: skip
PROMPTS = ["the cat sat on the mat. the cat sat on the mat. the cat sat on",
           "def f(x):\n    return x + 1\n\ndef g(x):\n    return x + 1\n\ndef h(x):\n",
           "abc abc abc abc abc abc abc"]  # fmt: skip


def llm(**kw: object) -> LLM:
    return LLM(model=ModelConfig(**SMALL), block_size=4, **kw)


def bits(xs: list[float]) -> list[bytes]:
    return [struct.pack("<d", x) for x in xs]


def test_parse_speculative() -> None:
    assert parse_speculative("off").k == 0 and parse_speculative(None).k == 0
    assert parse_speculative("ngram:4").k == 4 and parse_speculative("ngram:4").method == "ngram"
    for bad in ("ngram", "ngram:0", "ngram:x", "eagle:3", "ngram:99"):
        with pytest.raises(ValueError, match="speculative must be"):
            parse_speculative(bad)
    with pytest.raises(ValueError, match="speculative must be"):
        EngineConfig(speculative="ngram:")


def test_propose_ngram_takes_the_longest_most_recent_match() -> None:
    assert propose_ngram([1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3], 2) == [7, 1]  # latest "1 2 3" is followed by 7
    assert propose_ngram([5, 1, 2, 8, 2], 3) == [8, 2]  # only the 1-gram "2" recurs
    assert propose_ngram([1, 2, 3, 4], 3) == []
    assert propose_ngram([1, 1, 1], 0) == []


def test_accepted_tokens_stop_at_first_disagreement() -> None:
    assert accepted_tokens([4, 5, 6], [4, 5]) == [4, 5, 6]  # all accepted + bonus
    assert accepted_tokens([4, 9, 6], [4, 5]) == [4, 9]  # the target's token replaces the rejected draft
    assert accepted_tokens([7, 5, 6], [4, 5]) == [7]
    with pytest.raises(ValueError, match="drafts"):
        accepted_tokens([1], [1])


@pytest.mark.parametrize("params", [SamplingParams(max_tokens=16, logprobs=0, ignore_eos=True),
                                    SamplingParams(max_tokens=16, logprobs=0, ignore_eos=True,
                                                   temperature=0.3, top_k=4, seed=7)],
                         ids=["greedy", "seeded"])  # fmt: skip
def test_invariant_speculative_equals_plain_bitwise(params: SamplingParams) -> None:
    plain = llm(batch_invariant=True).generate(PROMPTS, params)
    spec_llm = llm(batch_invariant=True, speculative="ngram:3")
    spec = spec_llm.generate(PROMPTS, params)
    stats = spec_llm.engine.info()["speculative_stats"]
    assert stats["accepted_tokens"] > 0, stats  # else nothing was tested
    for a, b in zip(plain, spec, strict=True):
        assert a.token_ids == b.token_ids
        assert bits(a.logprobs) == bits(b.logprobs)
    assert spec_llm.engine.blocks.num_free == spec_llm.engine.num_blocks  # every block came back


def test_rejected_positions_give_their_blocks_back() -> None:
    """After every step a decoding sequence holds exactly the blocks its valid KV needs (plus what
    the scheduler allocates for the next step's tokens, which happens only when it schedules)."""
    eng = llm(batch_invariant=True, speculative="ngram:8").engine
    eng.add_request("r", list(PROMPTS[2].encode()), SamplingParams(max_tokens=40, ignore_eos=True))
    seq = eng.seqs["r"]
    rejected = 0
    while eng.has_unfinished():
        before = eng.spec_stats.draft_tokens - eng.spec_stats.accepted_tokens
        eng.step()
        rejected += eng.spec_stats.draft_tokens - eng.spec_stats.accepted_tokens - before
        if not seq.finished:
            assert len(seq.block_table) == -(-seq.num_computed // eng.config.block_size)
            assert seq.num_computed == seq.num_tokens - 1
    assert rejected > 0 and eng.spec_stats.accepted_tokens > 0, eng.spec_stats
    assert len(seq.output_ids) == 40 and eng.blocks.num_free == eng.num_blocks


def test_prefix_cache_with_speculation_equals_plain() -> None:
    """Blocks filled by accepted drafts are hashed with the accepted tokens only: a second request
    that shares the first one's output as its prompt hits the cache and still matches plain."""
    params = SamplingParams(max_tokens=16, ignore_eos=True, logprobs=0)
    runs = []
    for spec in ("off", "ngram:3"):
        m = llm(batch_invariant=True, enable_prefix_cache=True, speculative=spec)
        first = m.generate([PROMPTS[0]], params)[0]
        second = m.generate([first.prompt_token_ids + first.token_ids], params)[0]
        runs.append((first.token_ids, second.token_ids, bits(second.logprobs)))
        assert m.engine.blocks.hits > 0
    assert runs[0] == runs[1]


def test_sampling_with_shared_rng_is_refused() -> None:
    eng = llm(speculative="ngram:2", shared_rng=True).engine
    with pytest.raises(ValueError, match=r"speculative decoding \(ngram:2\) with sampling .*--shared-rng"):
        eng.add_request("s", [1, 2, 3], SamplingParams(temperature=0.7, seed=1))
    eng.add_request("g", [1, 2, 3], SamplingParams(max_tokens=2))  # greedy draws nothing: allowed


def test_info_reports_speculation() -> None:
    info = llm(speculative="ngram:5").engine.info()
    assert info["speculative"] == "ngram:5" and info["speculative_k"] == 5
    assert info["speculative_stats"]["draft_tokens"] == 0


def test_serve_flag_bad_value_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_invariance.engine.server_cli import serve_main

    assert serve_main(["--speculative", "ngram:0"]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "speculative must be 'off' or 'ngram:K'" in err, err


def test_server_refuses_sampling_with_shared_rng_as_400() -> None:
    pytest.importorskip("fastapi")
    requests = pytest.importorskip("requests")
    from pytest_invariance.engine.server import ServerThread, create_app

    cfg = EngineConfig(model=ModelConfig(**SMALL), speculative="ngram:2", shared_rng=True, max_num_seqs=2)
    with ServerThread(create_app(cfg)) as url:
        body = {"prompt": "abc abc", "max_tokens": 2, "temperature": 0.7, "seed": 3}
        r = requests.post(url + "/v1/completions", json=body, timeout=60)
        assert r.status_code == 400, r.text
        assert "speculative decoding (ngram:2) with sampling" in r.json()["error"]["message"]
        greedy = requests.post(url + "/v1/completions", json={**body, "temperature": 0}, timeout=60)
        assert greedy.status_code == 200, greedy.text
