"""Decode graphs: padding to the capture ladder moves no row in invariant mode, and in default mode
the ladder's buckets are the classes a row's bits follow.

On CPU the graphs run as the static-buffer forward without a capture (``cuda_graphs="on"``):
the buckets, the padding rows, the spare block and the buffers are the ones a CUDA graph replays.
``test_captured_graphs_on_cuda`` checks the capture itself where a GPU is present.
"""

from __future__ import annotations

import struct

import pytest
import torch

from pytest_invariance.engine.config import EngineConfig, ModelConfig, default_ladder
from pytest_invariance.engine.decode_graphs import width_class
from pytest_invariance.engine.llm import LLM
from pytest_invariance.engine.sampler import SamplingParams

PARAMS = SamplingParams(max_tokens=10, ignore_eos=True, logprobs=2)


def _prompts(n: int) -> list[list[int]]:
    """A fixed probe first, then distinct neighbours (lengths 9..15: the batch has ragged contexts)."""
    probe = [5, 17, 3, 99, 42, 8, 61, 7, 250, 11, 4]
    return [probe] + [[(13 * i + 7 * j + 1) % 250 + 3 for j in range(9 + i % 7)] for i in range(1, n)]


def _bits(c) -> list:
    """Tokens, chosen-token logprobs and top alternatives of one completion, floats as their bits."""
    f = lambda x: struct.pack("<d", x)  # noqa: E731
    return [c.token_ids, [f(x) for x in c.logprobs], [[(t, f(x)) for t, x in row] for row in c.top_logprobs]]


def _probe(llm: LLM, n: int) -> list:
    return _bits(llm.generate(_prompts(n), PARAMS)[0])


@pytest.fixture(scope="module")
def invariant_engines():
    return LLM(batch_invariant=True, cuda_graphs="on"), LLM(batch_invariant=True, cuda_graphs="off")


def test_invariant_mode_padding_cannot_change_a_row(invariant_engines):
    graphs, eager = invariant_engines
    alone = _probe(eager, 1)
    for n in (1, 3, 5, 9):  # buckets 1, 4, 8, 16: 0, 1, 3 and 7 padding rows
        assert _probe(graphs, n) == alone, f"batch {n} through the graphs moved the probe's bits"
    info = graphs.info()["cuda_graphs"]
    assert info["replays"] > 0 and info["eager_decode_steps"] == 0
    assert info["decode"].startswith("static buffers")


def test_default_mode_rows_follow_the_ladder_buckets():
    """5 and 8 rows both run as 8 (one bucket: identical bits); 9 rows run as 16, where the M-bucket
    GEMM leaves split-K (M <= 8) for one pass: a designed class edge at the bucket edge, on any host."""
    llm = LLM(cuda_graphs="on")
    in_bucket = [_probe(llm, n) for n in (5, 8)]
    assert all(b == in_bucket[0] for b in in_bucket[1:])
    assert _probe(llm, 9) != in_bucket[0]


def test_steps_beyond_the_ladder_and_mixed_steps_run_eager(invariant_engines):
    _, eager = invariant_engines
    llm = LLM(batch_invariant=True, cuda_graphs="on", cuda_graph_buckets=(1, 2))
    outs = llm.generate(_prompts(3), PARAMS)  # 3 decodes: above the ladder
    info = llm.info()["cuda_graphs"]
    assert info["eager_decode_steps"] > 0 and info["ladder"] == [1, 2]
    assert [_bits(c) for c in outs] == [_bits(c) for c in eager.generate(_prompts(3), PARAMS)]
    eng = llm.engine
    eng.add_request("p", _prompts(1)[0], SamplingParams(max_tokens=2, ignore_eos=True))
    eng.step()  # a prefill step: never through a graph
    assert eng.last_step_stats["graph"] is False
    eng.step()
    assert eng.last_step_stats["graph"] is True and eng.last_step_stats["num_tokens_padded"] == 1


def test_ladder_and_width_classes():
    assert default_ladder(64) == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    assert default_ladder(5) == (1, 2, 4, 8)
    assert [width_class(b, 512) for b in (1, 8, 9, 33, 600)] == [8, 8, 16, 64, 512]
    assert EngineConfig(device="cuda").graph_ladder == default_ladder(64)
    assert EngineConfig().graph_ladder == ()  # CPU, auto: eager, no padding
    assert EngineConfig(cuda_graphs="off", cuda_graph_buckets=(4, 1)).graph_ladder == (1, 4)  # the control knob
    with pytest.raises(ValueError, match="cuda_graphs"):
        EngineConfig(cuda_graphs="always")
    with pytest.raises(ValueError, match="tensor_parallel 1"):
        EngineConfig(cuda_graphs="on", tensor_parallel=2)
    with pytest.raises(ValueError, match="split_kv_size"):
        EngineConfig(split_kv="fixed", split_kv_size=8)
    moe = ModelConfig(hidden=64, layers=1, heads=4, kv_heads=2, head_dim=16, intermediate=128, n_experts=4, top_k=2)
    assert EngineConfig(device="cuda", model=moe).graph_ladder == ()  # auto: expert loops read routing on the host


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_captured_graphs_on_cuda():
    """Captured graphs replay the eager bits in invariant mode, and default mode's buckets are classes."""
    graphs = LLM(batch_invariant=True, device="cuda")
    eager = LLM(batch_invariant=True, device="cuda", cuda_graphs="off")
    alone = _probe(eager, 1)
    for n in (1, 3, 5, 9, 17):
        assert _probe(graphs, n) == alone, f"batch {n}: a captured graph moved the probe's bits"
    info = graphs.info()["cuda_graphs"]
    assert info["decode"] == "cuda graphs" and info["captured"] > 0
    default = LLM(device="cuda")
    in_bucket = [_probe(default, n) for n in (5, 8)]
    assert in_bucket[0] == in_bucket[1]
