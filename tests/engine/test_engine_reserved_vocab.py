"""Reserved ids: the demo accepts the token ids real-tokenizer drivers send (SGLang's radix-cache test
draws from [100, 50000]) and a context of 8192, without changing a single output bit.

A reserved id (at or above ``scored_vocab``) has an embedding row, generated on lookup with the same
bits as the full synthetic table, and no LM-head row: its logit is -inf, so it is never emitted and
its prompt logprob is -inf (-9999.0 over HTTP).
"""

from __future__ import annotations

import math

import pytest
import torch

from pytest_invariance.engine.config import BYTE_VOCAB_SIZE, DEMO_VOCAB_SIZE, ModelConfig, demo_model
from pytest_invariance.engine.llm import LLM
from pytest_invariance.engine.sampler import SamplingParams
from pytest_invariance.engine.weights import synthetic_rows, synthetic_tensor, synthetic_weights

TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, max_position=256)
NAME = "model.embed_tokens.weight"


def reserved(**kw: object) -> ModelConfig:
    return ModelConfig(**TINY, vocab_size=DEMO_VOCAB_SIZE, scored_vocab=BYTE_VOCAB_SIZE, **kw)


def test_demo_accepts_drivers_ids_and_long_prompts():
    cfg = demo_model()
    assert cfg.vocab_size > 50000 and cfg.max_position >= 8192
    assert cfg.output_vocab == BYTE_VOCAB_SIZE  # it emits only byte-vocabulary tokens


def test_reserved_rows_are_the_full_tables_rows():
    cfg = ModelConfig(**TINY, vocab_size=700, scored_vocab=BYTE_VOCAB_SIZE)
    full = torch.from_numpy(synthetic_tensor(cfg.seed, NAME, (700, cfg.hidden), cfg.weight_scale)).bfloat16()
    rows = [259, 260, 699, 300, 259]
    assert torch.equal(synthetic_rows(cfg, NAME, rows).view(torch.int16), full[rows].view(torch.int16))
    weights = dict(synthetic_weights(cfg))
    assert weights[NAME].shape == (BYTE_VOCAB_SIZE, cfg.hidden)  # only the scored rows are built
    assert torch.equal(weights[NAME].view(torch.int16), full[:BYTE_VOCAB_SIZE].view(torch.int16))
    assert weights["lm_head.weight"].shape == (BYTE_VOCAB_SIZE, cfg.hidden)


def test_outputs_are_bit_identical_to_the_byte_vocabulary_model():
    p = SamplingParams(max_tokens=12, ignore_eos=True, logprobs=3, prompt_logprobs=0)
    prompts = ["The quick brown fox", "ab"]
    small = LLM(model=ModelConfig(**TINY), num_blocks=64).generate(prompts, p)
    big = LLM(model=reserved(), num_blocks=64).generate(prompts, p)
    for a, b in zip(small, big, strict=True):
        assert a.token_ids == b.token_ids
        assert [x.hex() for x in a.logprobs] == [x.hex() for x in b.logprobs]
        assert a.prompt_logprobs == b.prompt_logprobs


def test_reserved_ids_are_read_never_emitted_and_score_minus_infinity():
    llm = LLM(model=reserved(), num_blocks=64)
    prompt = [100, 42005, 50000, 7396, 65]
    p = SamplingParams(max_tokens=8, ignore_eos=True, logprobs=5, prompt_logprobs=0)
    out = llm.generate([prompt], p)[0]
    assert all(0 <= t < BYTE_VOCAB_SIZE for t in out.token_ids)
    assert out.prompt_logprobs[0] is None
    assert [math.isinf(x) for x in out.prompt_logprobs[1:]] == [True, True, True, False]
    # the reserved rows are real inputs: another reserved id changes the output
    other = llm.generate([[100, 42006, 50000, 7396, 65]], p)[0]
    assert [x.hex() for x in other.logprobs] != [x.hex() for x in out.logprobs]


@pytest.mark.parametrize("bad", [dict(scored_vocab=DEMO_VOCAB_SIZE + 1), dict(scored_vocab=-1)])
def test_scored_vocab_out_of_range_is_an_error(bad):
    with pytest.raises(ValueError, match="scored_vocab"):
        ModelConfig(**TINY, vocab_size=DEMO_VOCAB_SIZE, **bad)
