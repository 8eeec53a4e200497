"""Block manager bookkeeping and the continuous-batching scheduler (tiny model, CPU)."""

from __future__ import annotations

import pytest

from pytest_invariance.engine.block_manager import BlockManager
from pytest_invariance.engine.config import EngineConfig, ModelConfig
from pytest_invariance.engine.engine import LLMEngine
from pytest_invariance.engine.sampler import SamplingParams
from pytest_invariance.engine.sequence import Sequence

TINY = ModelConfig(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, max_position=256)


def _seq(rid: str, n: int, arrival: int = 0, base: int = 0) -> Sequence:
    return Sequence(rid, [(base + i) % 256 for i in range(n)], SamplingParams(), arrival=arrival, seed=0)


def test_block_manager_alloc_and_free():
    bm = BlockManager(num_blocks=8, block_size=4)
    a, b = _seq("a", 10), _seq("b", 5)
    assert bm.allocate(a, 10) and len(a.block_table) == 3
    assert bm.allocate(b, 5) and len(b.block_table) == 2
    assert bm.num_free == 3
    assert bm.allocate(a, 12) and len(a.block_table) == 3  # still fits in 3 blocks
    assert not bm.allocate(a, 30)  # needs 5 more, 3 free: nothing taken
    assert len(a.block_table) == 3 and bm.num_free == 3
    assert set(a.block_table).isdisjoint(b.block_table)
    bm.release(a)
    assert bm.num_free == 6 and a.block_table == []
    bm.release(b)
    assert bm.num_free == 8


def test_prefix_cache_hits_full_blocks_only():
    bm = BlockManager(num_blocks=16, block_size=4, enable_prefix_cache=True)
    a = _seq("a", 11)
    assert bm.match_prefix(a) == 0
    bm.allocate(a, 11)
    a.num_computed = 11
    bm.commit(a)  # two full blocks hashed
    bm.release(a)  # freed, but hashes kept
    b = _seq("b", 11)  # same prompt
    assert bm.match_prefix(b) == 8 and b.num_computed == 8
    assert b.block_table == a_blocks_prefix(bm, b)
    c = _seq("c", 9)  # same first 8 tokens, 9 tokens: at most 8 cached, the last token recomputed
    assert bm.match_prefix(c) == 8
    d = _seq("d", 8)  # 8 tokens: only (8 - 1) // 4 = 1 block may come from the cache
    assert bm.match_prefix(d) == 4
    e = _seq("e", 11, base=1)  # different tokens: miss
    assert bm.match_prefix(e) == 0
    assert bm.hits == 2 + 2 + 1
    bm.flush()
    f = _seq("f", 11)
    assert bm.match_prefix(f) == 0


def a_blocks_prefix(bm: BlockManager, seq: Sequence) -> list[int]:
    """The cached blocks a hit must point at (the ones registered under the chained hashes)."""
    return [bm.by_hash[h] for h in seq.block_hashes]


def test_prefix_cache_off_never_hits():
    bm = BlockManager(num_blocks=16, block_size=4, enable_prefix_cache=False)
    a = _seq("a", 11)
    bm.allocate(a, 11)
    a.num_computed = 11
    bm.commit(a)
    assert bm.match_prefix(_seq("b", 11)) == 0


def _engine(**kw) -> LLMEngine:
    return LLMEngine(EngineConfig(model=TINY, **kw))


def test_scheduler_admits_every_step_and_mixes_prefill_with_decode():
    eng = _engine(max_num_batched_tokens=64, chunk_size=32, max_num_seqs=8)
    p = SamplingParams(max_tokens=8, ignore_eos=True)
    done: dict[str, list[int]] = {}

    def step() -> None:
        for o in eng.step():
            done.setdefault(o.request_id, []).append(o.token_id)

    eng.add_request("a", list(range(20)), p)
    step()
    assert eng.last_step_stats == {
        "batch_size": 1,
        "num_tokens": 20,
        "num_prefill": 1,
        "num_decode": 0,
        "waiting": 0,
        "num_tokens_padded": 20,
        "graph": False,
    }
    eng.add_request("b", list(range(50, 120)), p)  # 70 tokens: chunked
    step()  # admitted at once, next to a's decode
    s = eng.last_step_stats
    assert (s["batch_size"], s["num_prefill"], s["num_decode"]) == (2, 1, 1)
    assert s["num_tokens"] == 1 + 32
    eng.add_request("c", [7] * 5, p)
    step()  # a decodes, b's second chunk, c admitted: three in one forward
    s = eng.last_step_stats
    assert (s["batch_size"], s["num_prefill"], s["num_decode"]) == (3, 2, 1)
    assert s["num_tokens"] == 1 + 32 + 5
    while eng.has_unfinished():
        step()
    assert {k: len(v) for k, v in done.items()} == {"a": 8, "b": 8, "c": 8}


def test_budget_cuts_chunks_and_max_num_seqs_queues():
    eng = _engine(max_num_batched_tokens=16, chunk_size=256, max_num_seqs=2)
    p = SamplingParams(max_tokens=2, ignore_eos=True)
    for r in "abc":
        eng.add_request(r, list(range(10)), p)
    eng.step()
    s = eng.last_step_stats
    assert (s["batch_size"], s["num_tokens"], s["waiting"]) == (2, 16, 1)  # b got the 6 left of the budget
    steps = 0
    while eng.has_unfinished():
        eng.step()
        assert eng.last_step_stats["batch_size"] <= 2
        steps += 1
    assert steps < 20


def test_invariant_mode_aligns_chunks_to_blocks():
    eng = _engine(
        max_num_batched_tokens=24, max_num_seqs=4, chunk_size=256, block_size=8, batch_invariant=True
    )
    p = SamplingParams(max_tokens=1, ignore_eos=True)
    eng.add_request("a", list(range(12)), p)
    eng.add_request("b", list(range(40)), p)
    eng.step()
    assert eng.last_step_stats["num_tokens"] == 12 + 8  # b's chunk ends on a block edge, not at 12
    b = eng.seqs["b"]
    assert b.num_computed == 8


def test_preemption_recomputes_and_still_finishes():
    # 6 blocks of 4 tokens: two 10-token prompts growing to 18 cannot both stay resident.
    eng = _engine(num_blocks=6, block_size=4, max_num_batched_tokens=64)
    p = SamplingParams(max_tokens=8, ignore_eos=True)
    eng.add_request("a", list(range(10)), p)
    eng.add_request("b", list(range(100, 110)), p)
    got: dict[str, list[int]] = {"a": [], "b": []}
    while eng.has_unfinished():
        for o in eng.step():
            got[o.request_id].append(o.token_id)
    assert eng.scheduler.num_preempted > 0
    assert len(got["a"]) == 8 and len(got["b"]) == 8
    assert eng.blocks.num_free == 6


def test_prefix_cache_in_engine_reports_hits():
    eng = _engine(enable_prefix_cache=True, block_size=4)
    p = SamplingParams(max_tokens=2, ignore_eos=True)
    prompt = list(range(30))
    eng.add_request("a", prompt, p)
    while eng.has_unfinished():
        eng.step()
    eng.add_request("b", prompt, p)
    eng.step()
    assert eng.last_step_stats["num_tokens"] == 30 - 28  # 7 full blocks served from the cache
    assert eng.flush_cache() is True


@pytest.mark.parametrize(
    "ids, max_tokens, match",
    [
        ([], 4, "empty"),
        ([1, 2, 300], 4, "outside the vocabulary"),
        ([-1], 4, "outside"),
        (list(range(250)), 10, "context length"),
    ],
)
def test_bad_requests_raise_clear_errors(ids, max_tokens, match):
    eng = _engine()
    with pytest.raises(ValueError, match=match):
        eng.add_request("x", ids, SamplingParams(max_tokens=max_tokens))


def test_duplicate_id_and_abort():
    eng = _engine()
    p = SamplingParams(max_tokens=50, ignore_eos=True)
    eng.add_request("x", [1, 2, 3], p)
    with pytest.raises(ValueError, match="duplicate"):
        eng.add_request("x", [1], p)
    eng.step()
    eng.abort("x")
    outs = eng.step()
    assert [(o.request_id, o.finish_reason) for o in outs] == [("x", "abort")]
    assert not eng.has_unfinished()
    assert eng.blocks.num_free == eng.num_blocks


def test_stop_tokens_and_logprobs():
    eng = _engine()
    # Discover the greedy continuation, then stop on its third token.
    eng.add_request("probe", [5, 6, 7], SamplingParams(max_tokens=3, ignore_eos=True))
    toks = []
    while eng.has_unfinished():
        toks += [o.token_id for o in eng.step()]
    eng.add_request(
        "s",
        [5, 6, 7],
        SamplingParams(
            max_tokens=10, stop_token_ids=(toks[2],), ignore_eos=True, logprobs=3, prompt_logprobs=2
        ),
    )
    outs = []
    while eng.has_unfinished():
        outs += eng.step()
    assert [o.token_id for o in outs] == toks[: toks.index(toks[2]) + 1]
    assert outs[-1].finish_reason == "stop"
    first = outs[0]
    assert first.prompt_logprobs[0] is None and len(first.prompt_logprobs) == 3
    assert all(lp <= 0 for lp in first.prompt_logprobs[1:])
    assert len(first.prompt_top_logprobs[1]) == 2
    for o in outs:
        assert len(o.top_logprobs) == 3
        assert o.top_logprobs[0][1] >= o.top_logprobs[1][1] >= o.top_logprobs[2][1]
        assert o.top_logprobs[0][0] == o.token_id  # greedy: the chosen token is the top one
        assert o.logprob == o.top_logprobs[0][1]
    assert outs[1].prompt_logprobs is None


def test_cuda_graph_buckets_pad_decode_batches():
    # The bucket ladder is a control knob: padded rows change the GEMM shapes, never the outputs' count.
    eng = _engine(cuda_graph_buckets=(1, 4, 8))
    p = SamplingParams(max_tokens=3, ignore_eos=True)
    for r in "abc":
        eng.add_request(r, [1, 2, 3], p)
    eng.step()  # prefill: never padded
    assert eng.last_step_stats["num_tokens_padded"] == 9
    outs = eng.step()  # three decodes padded to the bucket of 4
    assert eng.last_step_stats["num_tokens_padded"] == 4 and len(outs) == 3


def test_prompt_logprobs_bypass_the_prefix_cache():
    eng = _engine(enable_prefix_cache=True, block_size=4)
    prompt = list(range(30))
    eng.add_request("a", prompt, SamplingParams(max_tokens=1, prompt_logprobs=0))
    outs = []
    while eng.has_unfinished():
        outs += eng.step()
    eng.add_request("b", prompt, SamplingParams(max_tokens=1, prompt_logprobs=0))
    while eng.has_unfinished():
        outs += eng.step()
    a, b = (o.prompt_logprobs for o in outs)
    assert len(a) == len(b) == 30 and a == b
