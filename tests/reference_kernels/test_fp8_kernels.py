"""Reference FP8 GEMM: quantization semantics (per token vs per tensor), accuracy, invariance,
the dynamic-scale mutant, and the stock ``torch._scaled_mm`` where it exists."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from pytest_invariance.oracles.batch import batch_size_oracle  # noqa: E402
from pytest_invariance.oracles.bits import ulp_distance  # noqa: E402
from pytest_invariance.oracles.inputs import rows_pool  # noqa: E402
from pytest_invariance.reference_kernels import fp8  # noqa: E402
from pytest_invariance.reference_kernels.mutants.fp8_dynamic_scale import (  # noqa: E402
    fp8_dynamic_scale_linear,
    fp8_splitk_per_call,
)

SIZES = [1, 2, 3, 16, 17, 20]


def _setup(k=64, n=48, rows=20):
    x = rows_pool(rows, (k,), 2)
    wq, ws = fp8.quantize_weight(rows_pool(n, (k,), 1))
    return x, wq, ws


def test_per_token_scale_is_row_local_and_per_tensor_is_not():
    x = rows_pool(8, (64,), 3)
    s_tok = fp8.per_token_scale(x)
    assert s_tok.shape == (8, 1)
    assert torch.equal(s_tok[:1], fp8.per_token_scale(x[:1]))
    assert torch.equal(fp8.per_token_scale(x[:1]), (x[:1].abs().amax() / fp8.E4M3_MAX).reshape(1, 1))
    big = x.clone()
    big[5] *= 1000
    assert torch.equal(fp8.per_token_scale(big)[0], s_tok[0])  # a loud neighbour changes nothing
    assert not torch.equal(fp8.tensor_scale(big), fp8.tensor_scale(x))  # ...but the batch amax
    xq, _ = fp8.quantize_activation(x, None)
    assert xq.dtype == fp8.E4M3
    assert xq.float().abs().amax(dim=1).eq(fp8.E4M3_MAX).all()  # every row uses the full range


@pytest.mark.parametrize("static", [False, True], ids=["token", "tensor-static"])
def test_fp8_gemm_cpu_and_interpreter_agree_and_are_accurate(static):
    x, wq, ws = _setup()
    xs = fp8.tensor_scale(x) if static else None
    cpu = fp8.fp8_linear(x, wq, ws, xs, backend="cpu")
    interp = fp8.fp8_linear(x, wq, ws, xs, backend="interpret")
    assert cpu.dtype == torch.bfloat16
    # exact products, fp32 sums of 64 terms, same epilogue order: at most one bf16 ulp apart
    assert ulp_distance(cpu, interp).max() <= 1
    xq, s = fp8.quantize_activation(x, xs)
    exact = (xq.double() @ wq.double().T) * s.double() * ws.double()
    assert ulp_distance(cpu, exact.to(torch.bfloat16)).max() <= 1


@pytest.mark.parametrize("backend", ["cpu", "interpret"])
@pytest.mark.parametrize("static", [False, True], ids=["token", "tensor-static"])
def test_reference_fp8_invariant_and_mutant_divergent(backend, static):
    x, wq, ws = _setup()
    xs = fp8.tensor_scale(rows_pool(64, (64,), 99)) if static else None
    ref = batch_size_oracle(lambda r: fp8.fp8_linear(r, wq, ws, xs, backend=backend), x, SIZES)
    assert ref.diverged is False
    mut = batch_size_oracle(lambda r: fp8_dynamic_scale_linear(r, wq, ws), x, SIZES)
    assert mut.diverged is True


def test_fp8_splitk_per_call_changes_between_calls():
    x, wq, ws = _setup(k=256, n=64, rows=4)
    f = fp8_splitk_per_call()
    outs = [f(x, wq, ws) for _ in range(4)]
    assert any(not torch.equal(outs[0], o) for o in outs[1:])


@pytest.mark.skipif(not fp8.scaled_mm_available("cpu"), reason="torch._scaled_mm missing on CPU")
@pytest.mark.parametrize("static", [False, True], ids=["token", "tensor-static"])
def test_stock_scaled_mm_agrees_with_reference(static):
    x, wq, ws = _setup()
    xs = fp8.tensor_scale(x) if static else None
    stock = fp8.stock_fp8_linear(x, wq, ws, xs)
    assert ulp_distance(stock, fp8.fp8_linear(x, wq, ws, xs, backend="cpu")).max() <= 1


@pytest.mark.gpu
def test_fp8_triton_on_cuda_invariant_across_class_edge():
    x = rows_pool(300, (4096,), 2, device="cuda")
    wq, ws = fp8.quantize_weight(rows_pool(4096, (4096,), 1, device="cuda"))
    res = batch_size_oracle(lambda r: fp8.fp8_linear(r, wq, ws), x, [1, 2, 63, 64, 65, 129, 300])
    assert res.diverged is False, res.describe()
