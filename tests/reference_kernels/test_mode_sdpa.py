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
}  # fmt: skip


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


def test_uncovered_cases_run_the_stock_kernel() -> None:
    q, k, v = _qkv()
    left_pad = torch.ones(B, 1, L, L, dtype=torch.bool)
    left_pad[:, :, :, :3] = False  # keys 0..2 masked: allowed keys are not a prefix
    bias = wide_spread((L, L), 5)  # an additive bias (ALiBi-like), not a 0 / -inf mask
    for kw in ({"attn_mask": left_pad}, {"attn_mask": bias}):
        stock = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)
        with enable():
            assert torch.equal(F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw), stock)
