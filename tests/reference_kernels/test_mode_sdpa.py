"""``enable()`` routes ``F.scaled_dot_product_attention`` to the reference attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from pytest_invariance.oracles.batch import batch_position_oracle, batch_size_oracle
from pytest_invariance.oracles.inputs import wide_spread
from pytest_invariance.reference_kernels import enable

B, HQ, HKV, L, D = 17, 4, 2, 12, 16


def _qkv(lk: int = L) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return wide_spread((B, HQ, L, D), 0), wide_spread((B, HKV, lk, D), 1), wide_spread((B, HKV, lk, D), 2)


CASES = {
    "causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
    "dense": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
    "bool-mask": lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.ones(L, L, dtype=torch.bool).tril(), enable_gqa=True),
    "additive-mask": lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.zeros(L, L).masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf")),
        enable_gqa=True),
    "left-pad": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=_left_pad(), enable_gqa=True),
    "packed-causal": lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=_packed_causal((5, 7)), enable_gqa=True),
}  # fmt: skip


def _left_pad(pad: int = 3) -> torch.Tensor:
    m = torch.ones(L, L, dtype=torch.bool).tril()
    m[:, :pad] = False
    m[:pad, pad] = True  # padded query rows see the first real key (no empty rows)
    return m


def _packed_causal(lengths: tuple[int, ...]) -> torch.Tensor:
    """Sequences packed into one row, each causal over its own keys (continuous batching's mask)."""
    seq = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    n = int(sum(lengths))
    return (seq[:, None] == seq[None, :]) & torch.ones(n, n, dtype=torch.bool).tril()


@pytest.mark.parametrize("case", sorted(CASES))
def test_routed_sdpa_is_batch_invariant_and_close_to_stock(case: str) -> None:
    q, k, v = _qkv()
    f = CASES[case]
    stock = f(q, k, v)
    packed = torch.cat([q.flatten(1), k.flatten(1), v.flatten(1)], 1)  # one row per sequence
    nq, nk = q[0].numel(), k[0].numel()

    def rows(x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        return f(x[:, :nq].reshape(n, HQ, L, D), x[:, nq : nq + nk].reshape(n, HKV, L, D),
                 x[:, nq + nk :].reshape(n, HKV, L, D))  # fmt: skip

    with enable():
        routed = f(q, k, v)
        size = batch_size_oracle(rows, packed, [1, 2, 3, 8, 9, 16, 17])
        pos = batch_position_oracle(rows, packed, [3, 17])
    assert not size.diverged and not pos.diverged
    assert not torch.equal(routed, stock)  # it really ran something else than the stock kernel
    torch.testing.assert_close(routed, stock, rtol=1e-4, atol=1e-4)


def test_causal_mask_and_is_causal_give_the_same_bits() -> None:
    q, k, v = _qkv()
    with enable():
        assert torch.equal(CASES["causal"](q, k, v), CASES["bool-mask"](q, k, v))


def test_a_sequence_packed_after_others_gets_the_bits_it_gets_alone() -> None:
    """Continuous batching packs requests into one row with a block-diagonal causal mask: the
    probe's rows must not depend on where it sits in the row or on what is packed before it."""
    q, k, v = (t[:1] for t in _qkv())
    with enable():
        alone = F.scaled_dot_product_attention(q[:, :, :5], k[:, :, :5], v[:, :, :5], is_causal=True, enable_gqa=True)
        for before in (1, 4, 7):
            qq, kk, vv = (torch.cat([t[:, :, 5 : 5 + before], t[:, :, :5]], 2) for t in (q, k, v))
            packed = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=_packed_causal((before, 5)), enable_gqa=True)
            assert torch.equal(packed[:, :, before:], alone), f"{before} keys packed before the probe"


def test_uncovered_cases_run_the_stock_kernel() -> None:
    q, k, v = _qkv()
    gaps = torch.ones(B, 1, L, L, dtype=torch.bool)
    gaps[:, :, :, 3:5] = False  # keys 3..4 masked: the allowed keys of a row are two runs
    bias = wide_spread((L, L), 5)  # an additive bias (ALiBi-like), not a 0 / -inf mask
    for kw in ({"attn_mask": gaps}, {"attn_mask": bias}):
        stock = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)
        with enable():
            assert torch.equal(F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw), stock)
