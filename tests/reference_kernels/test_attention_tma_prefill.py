"""The TMA prefill candidate (``Tiles(tma=True)``): K/V blocks through tensor descriptors instead of
per-element pointers. A block then also covers keys past its split's end (the next split's, the
next sequence's) and, for D below its block, the next head's columns; the kernel zeroes them where
the pointer loads read zeros, so the bits must equal the pointer prefill's (and so decode's), also
when those neighbours are not finite. Run
by the Triton interpreter in its own process; the H200 times it in ``bench_attention.py --sweep``."""

from __future__ import annotations

import pytest

_SCRIPT = r"""
import torch
from pytest_invariance.reference_kernels.attention import triton_attn as ta

TMA = ta.Tiles(tma=True)


def cu(lens):
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)


def same(a, b):
    return torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


g = torch.Generator().manual_seed(13)
checked = 0
for hq, hkv, d in ((4, 1, 16), (2, 2, 12)):  # GQA; MHA with D below its block (the next head's columns)
    lens = [100, 1, 33, 17]  # neighbours right after each sequence's last key
    q, k, v = (torch.randn(sum(lens), h, d, generator=g) * 2 for h in (hq, hkv, hkv))
    for split in (32, 48):  # tiled by its block; not tiled (masked blocks inside the sequence)
        base = ta.prefill_varlen_triton(q, k, v, cu(lens), cu(lens), split_size=split)
        got = ta.prefill_varlen_triton(q, k, v, cu(lens), cu(lens), split_size=split, tiles=TMA)
        assert same(got, base), ("tma vs pointer prefill", hq, hkv, d, split)
        checked += 1
    # chunked prefill (queries are the last tokens) and more queries than keys
    lq, lk = [20, 5], [100, 3]
    qc = torch.randn(sum(lq), hq, d, generator=g)
    kc, vc = (torch.randn(sum(lk), hkv, d, generator=g) for _ in range(2))
    base = ta.prefill_varlen_triton(qc, kc, vc, cu(lq), cu(lk), split_size=32)
    assert same(ta.prefill_varlen_triton(qc, kc, vc, cu(lq), cu(lk), split_size=32, tiles=TMA), base)
    checked += 1
# Non-finite neighbours stay out: with finite data the extra keys and columns meet p = 0 and q = 0,
# so only inf or NaN there (0 * inf) shows whether they are zeroed. Sequence 1 is all inf, and so is
# head 1 of sequence 0, whose first columns sit right after head 0's 12 in a 16-wide block.
lens = [150, 17]  # long enough for unmasked blocks (tiles of 64 tokens past the first)
q, k, v = (torch.randn(sum(lens), 2, 12, generator=g) for _ in range(3))
k[150:], v[150:], k[:150, 1], v[:150, 1] = float("inf"), float("inf"), float("inf"), float("inf")
base = ta.prefill_varlen_triton(q, k, v, cu(lens), cu(lens), split_size=32)
got = ta.prefill_varlen_triton(q, k, v, cu(lens), cu(lens), split_size=32, tiles=TMA)
assert bool(torch.isfinite(base[:150, 0]).all()), "the pointer prefill let a neighbour in"
assert same(got[:150, 0], base[:150, 0]), "a non-finite neighbour reached the TMA prefill"
checked += 1
print("OK", checked)
"""


def test_tma_prefill_bits_equal_pointer_prefill():
    pytest.importorskip("triton")
    from interpreter_run import run_interpreted

    run_interpreted(_SCRIPT, "OK 7")
