"""MoE reference kernels: tie-break rule, grouped routing, numerics vs a loop, Triton interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from pytest_invariance.reference_kernels.moe import (  # noqa: E402
    fp8_experts_torch,
    fused_experts_torch,
    quantize_weight,
    route,
)
from pytest_invariance.reference_kernels.moe.detmath import det_exp, det_silu  # noqa: E402
from pytest_invariance.reference_kernels.moe.stock import experts_loop  # noqa: E402


def test_ties_go_to_lowest_index_in_score_order():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0], [2.0, 2.0, 2.0, 2.0, 2.0]])
    _, ids = route(logits, 3)
    assert ids.tolist() == [[1, 2, 4], [0, 1, 2]]


def test_grouped_topk_keeps_best_groups_only():
    logits = torch.tensor([[9.0, 0.0, 0.0, 0.0, 8.0, 7.0, 0.0, 6.0]])  # groups of 2: g0 max 9, g2 max 8
    _, ids = route(logits, 2, scoring="sigmoid", n_groups=4, topk_groups=2)
    assert ids.tolist() == [[0, 4]]
    _, ids = route(logits, 2, n_groups=4, topk_groups=1)  # only group 0 survives: expert 1 beats 4
    assert ids.tolist() == [[0, 1]]


def test_weights_renormalised_and_match_softmax():
    logits = torch.randn(16, 32, generator=torch.Generator().manual_seed(0))
    w, ids = route(logits, 4)
    ref = torch.softmax(logits.double(), -1).gather(1, ids)
    torch.testing.assert_close(w.double(), ref / ref.sum(-1, keepdim=True), rtol=1e-6, atol=1e-7)
    assert torch.all(w[:, :-1] >= w[:, 1:])


def test_det_math_close_to_torch():
    x = torch.linspace(-80, 80, 20001)
    torch.testing.assert_close(det_exp(x), torch.exp(x), rtol=3e-7, atol=0)
    torch.testing.assert_close(det_silu(x), torch.nn.functional.silu(x), rtol=3e-6, atol=1e-30)


def _problem(t=12, h=32, i=16, e=8, k=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, h, generator=g).bfloat16()
    w1 = (torch.randn(e, 2 * i, h, generator=g) / h**0.5).bfloat16()
    w2 = (torch.randn(e, h, i, generator=g) / i**0.5).bfloat16()
    w, ids = route(torch.randn(t, e, generator=g), k)
    return x, w1, w2, w, ids


def test_fused_experts_match_stock_loop():
    x, w1, w2, w, ids = _problem()
    torch.testing.assert_close(
        fused_experts_torch(x, w1, w2, w, ids), experts_loop(x, w1, w2, w, ids), rtol=2e-2, atol=2e-2
    )


def test_fp8_experts_close_to_bf16():
    x, w1, w2, w, ids = _problem()
    (q1, s1), (q2, s2) = quantize_weight(w1), quantize_weight(w2)
    out = fp8_experts_torch(x, q1, q2, s1, s2, w, ids).float()
    ref = fused_experts_torch(x, w1, w2, w, ids).float()
    assert (out - ref).norm() / ref.norm() < 0.1


def test_row_alone_equals_row_in_batch_bitwise():
    x, w1, w2, w, ids = _problem(t=9)
    full = fused_experts_torch(x, w1, w2, w, ids)
    alone = fused_experts_torch(x[4:5], w1, w2, w[4:5], ids[4:5])
    assert torch.equal(full[4:5].view(torch.int16), alone.view(torch.int16))


_INTERP = textwrap.dedent(
    """
    import torch
    from pytest_invariance.reference_kernels.moe import route, fused_experts_torch, fp8_experts_torch, quantize_weight
    from pytest_invariance.reference_kernels.moe.fused_triton import fused_experts_triton, fp8_experts_triton
    g = torch.Generator().manual_seed(3)
    t, h, i, e, k = 9, 48, 40, 4, 2
    x = torch.randn(t, h, generator=g).bfloat16()
    w1 = (torch.randn(e, 2 * i, h, generator=g) / 7).bfloat16()
    w2 = (torch.randn(e, h, i, generator=g) / 6).bfloat16()
    w, ids = route(torch.randn(t, e, generator=g), k)
    out = fused_experts_triton(x, w1, w2, w, ids)
    torch.testing.assert_close(out, fused_experts_torch(x, w1, w2, w, ids), rtol=2e-2, atol=2e-2)
    alone = fused_experts_triton(x[5:6], w1, w2, w[5:6], ids[5:6])
    assert torch.equal(alone.view(torch.int16), out[5:6].view(torch.int16)), "triton: row alone != in batch"
    (q1, s1), (q2, s2) = quantize_weight(w1), quantize_weight(w2)
    o8 = fp8_experts_triton(x, q1, q2, s1, s2, w, ids)
    torch.testing.assert_close(o8, fp8_experts_torch(x, q1, q2, s1, s2, w, ids), rtol=2e-2, atol=2e-2)
    print("ok")
    """
)


def test_triton_kernels_under_interpreter():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-c", _INTERP], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]
