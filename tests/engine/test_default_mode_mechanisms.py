"""Default mode's batch dependence is designed: each mechanism makes a row's bits follow its batch
whatever the host's BLAS does, and each is a knob that ``/server_info`` reports and that turns off.

These tests compare bits through integer views and never rely on stock ``F.linear`` being
batch-variant (it is on some x86 CPUs and not on others).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_invariance.oracles.inputs import rows_pool  # noqa: E402
from pytest_invariance.reference_kernels.mutants import mbucket_matmul as MB  # noqa: E402
from pytest_invariance.reference_kernels.mutants.splitkv_decode import (  # noqa: E402
    num_splits,
    splitkv_decode_batched,
)

from pytest_invariance.engine import kernels as K  # noqa: E402
from pytest_invariance.engine.config import EngineConfig, ModelConfig, demo_model  # noqa: E402
from pytest_invariance.engine.llm import LLM  # noqa: E402
from pytest_invariance.engine.sampler import SamplingParams  # noqa: E402
from pytest_invariance.engine.weights import synthetic_weights  # noqa: E402

TINY = ModelConfig(hidden=64, layers=1, heads=4, kv_heads=2, head_dim=16, intermediate=128)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def test_m_bucket_takes_split_k_up_to_the_edge_and_one_pass_above():
    w = rows_pool(256, (512,), 1, torch.bfloat16)
    x = rows_pool(9, (512,), 2, torch.bfloat16)
    assert torch.equal(bits(MB.m_bucket_linear(x[:8], w, max_m=8)), bits(MB.splitk_linear(x[:8], w, parts=4)))
    assert torch.equal(bits(MB.m_bucket_linear(x, w, max_m=8)), bits(torch.nn.functional.linear(x, w)))


def test_split_k_changes_bits_of_most_rows_against_one_pass():
    """The designed difference: same K terms, another summation order, so rounding differs."""
    w = rows_pool(1536, (1024,), 1, torch.bfloat16)
    x = rows_pool(32, (1024,), 2, torch.bfloat16)
    split = bits(MB.splitk_linear(x, w, parts=4))
    one = bits(torch.nn.functional.linear(x, w))
    rows_differing = (split != one).any(dim=1).sum().item()
    assert rows_differing >= 4, f"split-K differed from one pass in only {rows_differing}/32 rows"


def test_split_k_keeps_the_bias_and_the_value():
    w = rows_pool(64, (96,), 1, torch.float32)
    x = rows_pool(3, (96,), 2, torch.float32)
    b = rows_pool(1, (64,), 3, torch.float32)[0]
    # fp32 sums of 96 wide-spread terms in two orders: declared tolerance, not bitwise
    torch.testing.assert_close(
        MB.splitk_linear(x, w, b, parts=3), torch.nn.functional.linear(x, w, b), atol=1e-4, rtol=1e-4
    )


def test_auto_split_count_follows_batch_and_context():
    # 2 threads x 16 units, 4 KV heads: 8 splits at batch 1, 4 at 2, 2 at 4, 1 from 8; capped by length
    split = [num_splits(b, 4, 1024, 32, max_splits=16, min_keys=16) for b in (1, 2, 4, 8, 16)]
    assert split == [8, 4, 2, 1, 1]
    assert num_splits(1, 4, 40, 32, max_splits=16, min_keys=16) == 3  # ceil(40 / 16) parts of ~13 keys
    assert num_splits(1, 4, 15, 32, max_splits=16, min_keys=16) == 1


def _decode_inputs(batch: int, ctx: int):
    kvh, h, d, block = 2, 4, 16, 16
    blocks = -(-ctx // block)
    g = torch.Generator().manual_seed(3)
    k_cache = torch.randn(batch * blocks, block, kvh, d, generator=g).bfloat16()
    v_cache = torch.randn(batch * blocks, block, kvh, d, generator=g).bfloat16()
    q = torch.randn(batch, h, d, generator=g).bfloat16()
    tables = torch.arange(batch * blocks).view(batch, blocks)
    return q, k_cache, v_cache, tables, torch.full((batch,), ctx)


def test_split_kv_changes_bits_against_one_pass_and_matches_in_value():
    q, kc, vc, tables, ctx = _decode_inputs(4, 64)
    one = splitkv_decode_batched(q, kc, vc, tables, ctx, scale=0.25, splits=1)
    split = splitkv_decode_batched(q, kc, vc, tables, ctx, scale=0.25, splits=4)
    assert not torch.equal(bits(one), bits(split)), "4 splits gave the bits of one pass"
    torch.testing.assert_close(split.float(), one.float(), atol=2e-2, rtol=2e-2)


def test_fixed_split_kv_cuts_at_its_size_whatever_the_padded_table():
    """``split_kv="fixed"``: a sequence's splits are 16-key multiples from position 0, so the same
    40-key sequence gives the same bits in a table padded to 64 keys (a longer neighbour) or not;
    a count from the padded width (the old cut: ceil(64 / 3) = 22 keys) moves them."""
    q, kc, vc, tables, ctx = _decode_inputs(2, 64)
    ctx[0] = 40
    alone = splitkv_decode_batched(q[:1], kc, vc, tables[:1, :3], ctx[:1], scale=0.25, split_size=16)
    padded = splitkv_decode_batched(q, kc, vc, tables, ctx, scale=0.25, split_size=16)
    assert torch.equal(bits(alone[0]), bits(padded[0]))
    by_count = splitkv_decode_batched(q, kc, vc, tables, ctx, scale=0.25, splits=3)
    assert not torch.equal(bits(by_count[0]), bits(alone[0]))
    eng = LLM(model=TINY, num_blocks=8, split_kv="fixed", split_kv_size=16).engine
    assert eng.kernels._split_args(None) == {"split_size": 16}


def test_server_info_names_each_mechanism_and_its_off_switch():
    on = LLM(model=TINY, num_blocks=8).info()
    assert on["gemm_strategy"] == "m-bucket" and on["split_kv"] == "auto"
    assert [m.split(" ")[0] for m in on["batch_mechanisms"]] == ["gemm", "split-KV", "cascade"]
    assert "split-K" in on["kernels"]["matmul"]
    # the engine's kernels are the catalogue's, under the matrix's implementation names
    assert on["kernel_implementations"]["matmul"] == "mutant:m-bucket-splitk"
    assert on["kernel_implementations"]["attention-decode"] == "mutant:splitkv-decode-batched"
    inv = LLM(model=TINY, num_blocks=8, batch_invariant=True).info()["kernel_implementations"]
    assert set(inv.values()) == {"reference"}
    off = LLM(
        model=TINY, num_blocks=8, gemm_strategy="one-pass", split_kv="none", prefix_attention="one-pass"
    ).info()
    assert off["batch_mechanisms"] == []
    assert LLM(model=TINY, num_blocks=8, batch_invariant=True).info()["batch_mechanisms"] == []
    with pytest.raises(ValueError, match="gemm_strategy"):
        EngineConfig(model=TINY, gemm_strategy="fastest")
    with pytest.raises(ValueError, match="prefix_attention"):
        EngineConfig(model=TINY, prefix_attention="flash")


def test_cascade_attention_changes_bits_against_one_softmax_and_matches_in_value():
    g = torch.Generator().manual_seed(0)
    h, n, ctx, d = 4, 16, 160, 32
    q = torch.randn(h, n, d, generator=g).bfloat16()
    k, v = (torch.randn(h, ctx, d, generator=g).bfloat16() for _ in range(2))
    mask = torch.arange(ctx)[None, :] <= torch.arange(ctx - n, ctx)[:, None]
    whole = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.17)
    cascade = K.cascade_attention(q, k, v, ctx - n, 0.17)
    assert not torch.equal(bits(whole), bits(cascade))
    torch.testing.assert_close(cascade.float(), whole.float(), atol=2e-2, rtol=2e-2)


def test_warm_prefix_cache_hit_computes_differently_in_default_mode_only():
    """The cache sweep's positive control: the same request cold and warm (a hit of 144 tokens)."""
    from pytest_invariance.e2e import neighbour

    prompt = neighbour(7, 160)
    p = SamplingParams(max_tokens=4, ignore_eos=True, logprobs=0)
    for invariant, differ in ((False, True), (True, False)):
        llm = LLM(num_blocks=64, enable_prefix_cache=True, batch_invariant=invariant)
        cold, warm = (llm.generate([prompt], p)[0] for _ in range(2))
        assert llm.engine.blocks.hits > 0
        assert (cold.logprobs != warm.logprobs) is differ, f"invariant={invariant}"


def test_demo_model_lm_head_shares_one_direction_bit_identically():
    cfg = demo_model()
    head = dict(synthetic_weights(cfg))["lm_head.weight"].float()
    again = dict(synthetic_weights(cfg))["lm_head.weight"].float()
    assert torch.equal(bits(head), bits(again))
    plain = dict(synthetic_weights(ModelConfig()))["lm_head.weight"].float()
    shared = (head - plain).mean(0)
    # the shared row is lm_head_shared logit stds long (weight std 1/sqrt(hidden) per element)
    assert abs(shared.norm().item() - cfg.lm_head_shared * cfg.weight_scale) < 0.05 * cfg.lm_head_shared


def _probe_logprobs(n: int, **knobs) -> list[float]:
    llm = LLM(num_blocks=256, **knobs)
    p = SamplingParams(max_tokens=24, ignore_eos=True, logprobs=0)  # contexts reach 44: 2 KV splits
    out = llm.generate(["The quick brown fox"] * n, p)
    assert max(c.max_batch_size for c in out) == n
    return out[0].logprobs


@pytest.mark.parametrize(
    "knob, off",
    [("gemm_strategy", "one-pass"), ("split_kv", "none")],
    ids=["gemm-m-bucket", "split-kv"],
)
def test_each_mechanism_changes_small_batches_only(knob, off):
    """Switching one mechanism off changes the probe's logprob bits alone (batch 1: split-K at M=1,
    several KV splits) and not in a batch of 16 (one GEMM pass, one KV split in both settings):
    the mechanism is what moves the bits, on any host, not the host's BLAS."""
    assert _probe_logprobs(1) != _probe_logprobs(1, **{knob: off})
    assert _probe_logprobs(16) == _probe_logprobs(16, **{knob: off})
