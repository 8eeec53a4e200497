"""Reference matmul kernels: accuracy against float64, invariance through the oracles, the mutant,
and the fp32 precision classifier. The Triton kernel runs under its interpreter on tiny shapes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_invariance.oracles.batch import batch_position_oracle, batch_size_oracle  # noqa: E402
from pytest_invariance.oracles.bits import ulp_distance  # noqa: E402
from pytest_invariance.oracles.inputs import rows_pool  # noqa: E402
from pytest_invariance.reference_kernels import matmul  # noqa: E402
from pytest_invariance.reference_kernels.mutants.splitk_matmul import (  # noqa: E402
    split_count,
    splitk_matmul,
    splitk_per_call,
)
from pytest_invariance.reference_kernels.precision import (  # noqa: E402
    BF16,
    IEEE,
    TF32,
    classify_fp32_matmul,
    round_mantissa,
)

pytest.importorskip("triton")

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SIZES = [1, 2, 3, 15, 16, 17, 20]


def _xw(dtype, k=40, n=24, rows=20):
    return rows_pool(rows, (k,), 2, dtype), rows_pool(n, (k,), 1, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_linear_matches_float64(dtype, backend):
    """Correctly rounded fp64 product for 16-bit outputs (exact products, fp32 sum of 40 terms),
    and within fp32 accumulation error for fp32."""
    x, w = _xw(dtype)
    out = matmul.linear(x, w, backend=backend)
    exact = x.double() @ w.double().T
    if dtype == torch.float32:
        bound = 40 * 2.0**-24 * (x.double().abs() @ w.double().abs().T)
        assert ((out.double() - exact).abs() <= bound).all()
    else:
        assert ulp_distance(out, exact.to(dtype)).max() <= 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mm_addmm_bmm_interpreter(dtype):
    x, w = _xw(dtype)
    b = w.t().contiguous()
    bias = rows_pool(1, (24,), 3, dtype)[0]
    tol = {"atol": 1e-3, "rtol": 1e-3} if dtype == torch.float32 else {"atol": 0.5, "rtol": 2e-2}
    exact = x.double() @ b.double()
    torch.testing.assert_close(matmul.mm(x, b, backend="interpret").double(), exact, **tol)
    got = matmul.addmm(bias, x, b, beta=0.5, alpha=2.0, backend="interpret").double()
    torch.testing.assert_close(got, 2.0 * exact + 0.5 * bias.double(), **tol)
    a3, b3 = rows_pool(3, (5, 40), 4, dtype), rows_pool(3, (40, 7), 5, dtype)
    torch.testing.assert_close(
        matmul.bmm(a3, b3, backend="interpret").double(), a3.double() @ b3.double(), **tol
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_reference_is_batch_invariant(dtype, backend):
    """Bitwise equal across batch sizes and positions (the control's divergence is shown in
    ``test_splitk_mutant_diverges_and_splits_by_m`` and by the suites)."""
    k = 64 if backend == "interpret" else 1024
    x, w = _xw(dtype, k=k, n=32 if backend == "interpret" else 512)
    f = lambda r: matmul.linear(r, w, backend=backend)  # noqa: E731
    assert batch_size_oracle(f, x, SIZES).diverged is False
    assert batch_position_oracle(f, x, [3, 17, 20]).diverged is False


def test_splitk_mutant_diverges_and_splits_by_m():
    assert [split_count(m, 4096) for m in (1, 8, 9, 32, 33, 128, 129)] == [8, 8, 4, 4, 2, 2, 1]
    assert split_count(1, 3) == 3
    x, w = _xw(torch.float32, k=1024, n=64, rows=40)
    res = batch_size_oracle(lambda r: splitk_matmul(r, w), x, [1, 2, 8, 9, 33, 40])
    assert res.diverged is True
    assert len(res.classes) >= 3  # at least the 8-, 4- and 2-split classes


def test_splitk_per_call_diverges_run_to_run():
    x, w = _xw(torch.float32, k=1024, n=64, rows=4)
    f = splitk_per_call()
    a, b = f(x, w), f(x, w)
    assert not torch.equal(a, b)


def test_precision_classifier():
    """IEEE fp32, TF32-emulated (inputs rounded to a 10-bit mantissa) and bf16-like products."""
    assert classify_fp32_matmul(lambda a, b: a.double().mm(b.double().T).float()).precision_class == IEEE
    tf32 = classify_fp32_matmul(lambda a, b: round_mantissa(a, 10) @ round_mantissa(b, 10).T)
    assert tf32.precision_class == TF32 and tf32.is_tf32 and tf32.quantization == "fp32-tf32"
    tf32_rz = classify_fp32_matmul(lambda a, b: round_mantissa(a, 10, "rz") @ round_mantissa(b, 10, "rz").T)
    assert tf32_rz.precision_class == TF32
    bf16 = classify_fp32_matmul(lambda a, b: a.bfloat16().float() @ b.bfloat16().float().T)
    assert bf16.precision_class == BF16


def test_reference_fp32_precision_is_ieee_on_both_backends():
    assert classify_fp32_matmul(lambda a, b: matmul.linear(a, b, backend="cpu")).precision_class == IEEE
    res = classify_fp32_matmul(lambda a, b: matmul.linear(a, b, backend="interpret"), m=16, n=16, k=64)
    assert res.precision_class == IEEE


def test_round_mantissa_matches_bf16_rounding():
    x = rows_pool(1, (4096,), 9)[0]
    assert torch.equal(round_mantissa(x, 7, "rn"), x.bfloat16().float())
    assert torch.equal(round_mantissa(-x.abs(), 7, "rn"), (-x.abs()).bfloat16().float())


def test_bad_backend_and_shapes_are_errors():
    x, w = _xw(torch.float32)
    with pytest.raises(ValueError, match="backend"):
        matmul.linear(x, w, backend="nope")
    with pytest.raises(ValueError):
        splitk_matmul(x, w[:, :3])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_triton_reference_on_cuda_invariant_across_class_edge(dtype):
    """On the GPU the decode (M <= 64) and large classes must give the same bits per row."""
    x = rows_pool(300, (4096,), 2, dtype, "cuda")
    w = rows_pool(4096, (4096,), 1, dtype, "cuda")
    f = lambda r: matmul.linear(r, w)  # noqa: E731
    res = batch_size_oracle(f, x, [1, 2, 63, 64, 65, 128, 129, 300])
    assert res.diverged is False, res.describe()
    exact = x.double() @ w.double().T
    rel = ((f(x).double() - exact).norm() / exact.norm()).item()
    # IEEE fp32 over K=4096 lands near 1e-6 relative; TF32 would be ~1e-3, so 1e-5 still tells them apart.
    assert rel < (1e-5 if dtype == torch.float32 else 1e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("layout", ["weight-view", "row-major"])
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
def test_tma_kernel_gives_the_pointer_kernels_bits(dtype, layout, persistent, monkeypatch):
    """TMA tiles (zero-filled past the edges) feed the same k-steps as masked loads: same bits, tails included."""
    from pytest_invariance.reference_kernels import matmul_triton as mt

    launched = []
    real = mt._descriptors
    monkeypatch.setattr(mt, "_descriptors", lambda *a, **k: launched.append(a[2]) or real(*a, **k))
    g = torch.Generator().manual_seed(7)
    m, k, n = 37, 40, 24  # tails in every dimension of a 16x16x16 tile; 80-byte rows stay TMA-aligned
    a = torch.randn(m, k, generator=g).to(dtype)
    w = torch.randn(n, k, generator=g).to(dtype)
    b = w.t() if layout == "weight-view" else w.t().contiguous()
    bias = torch.randn(n, generator=g).to(dtype).expand(m, n)[None]
    pointer = mt.TileConfig(16, 16, 16, 2, 4, 1)
    tma = mt.TileConfig(16, 16, 16, 2, 4, 1, tma=True, persistent=persistent)
    for args, kw in (((a[None], b[None]), {}), ((a[None], b[None], bias), {"alpha": 2.0, "beta": 0.5})):
        want = mt.bmm_triton(*args, config=pointer, **kw)
        got = mt.bmm_triton(*args, config=tma, **kw)
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    assert launched == [layout == "weight-view"] * 2


def test_tma_falls_back_to_pointer_loads_on_unaligned_rows():
    """Rows whose byte stride TMA cannot address (K=20 bf16: 40 bytes) take the pointer kernel."""
    from pytest_invariance.reference_kernels import matmul_triton as mt

    a = torch.randn(3, 20).to(torch.bfloat16)
    w = torch.randn(8, 20).to(torch.bfloat16)
    assert mt._tma_layout(a[None], w.t()[None]) is None
    assert mt._tma_layout(a[None, :, :16], w.t()[None, :16]) is None  # 40-byte row stride even when sliced
    assert mt._tma_layout(torch.randn(2, 3, 16).half(), torch.randn(2, 16, 8).half()) is None  # batched
    row = torch.randn(1, 16).half()
    assert mt._tma_layout(row.expand(4, 16)[None], torch.randn(16, 8).half()[None]) is None  # broadcast rows
    assert mt._tma_layout(row[None], torch.randn(8, 16).half().t()[None]) is True
    assert mt._tma_layout(row[None], torch.randn(16, 8).half()[None]) is False
    got = mt.bmm_triton(a[None], w.t()[None], config=mt.TileConfig(16, 16, 16, 1, 4, 1, tma=True))[0]
    exact = a.double() @ w.double().T
    torch.testing.assert_close(got.double(), exact, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_tma_and_pointer_kernels_agree_on_cuda(dtype):
    """On the GPU the TMA kernel (both B layouts, bias epilogue) and the pointer kernel give the same bits.

    Shapes sit on both sides of the two-wave edge (cdiv(M,128)*cdiv(N,256) vs 2*SMs) and have tails.
    """
    from pytest_invariance.reference_kernels import matmul_triton as mt

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    edge = -(-2 * sms // 24) * 128  # first M of the 128x256 class for N=6144 (24 tiles of 256)
    pointer = mt.TileConfig(128, 256, 64, 8, 8, 3)
    for m, k, n in ((edge, 4096, 6144), (edge - 128, 4096, 6144), (300, 4096, 6144), (129, 14336, 4096),
                    (65, 896, 1152), (200, 4000, 520)):  # fmt: skip
        a = rows_pool(m, (k,), 3, dtype, "cuda")
        w = rows_pool(n, (k,), 4, dtype, "cuda")
        bias = rows_pool(1, (n,), 5, dtype, "cuda")[0].expand(m, n)[None]
        for b in (w.t(), w.t().contiguous()):  # a linear layer's weight view, and a row-major [K, N]
            for extra, kw in (((), {}), ((bias,), {"alpha": 2.0, "beta": 0.5})):
                want = mt.bmm_triton(a[None], b[None], *extra, config=pointer, **kw)
                for cfg in (mt.pick_config(m, n, k, dtype, a.device, False),
                            mt.TileConfig(128, 256, 64, 8, 8, 3, tma=True, persistent=True)):  # fmt: skip
                    got = mt.bmm_triton(a[None], b[None], *extra, config=cfg, **kw)
                    assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (m, k, n, cfg, kw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_interpreter_dot_is_elementwise_so_row_bits_ignore_their_tile(dtype):
    """Under the interpreter ``tl.dot`` is replaced by an element-wise dot (see interpreter_dot):
    the same row gives the same bits at any row of the tile, next to any other rows, whatever BLAS
    numpy links. With numpy's matmul an fp32 row moved by 16384 ULP on an AMD EPYC."""
    from pytest_invariance.reference_kernels import interpreter_dot

    x, w = _xw(dtype, k=64, n=32, rows=20)
    alone = matmul.linear(x[:1], w, backend="interpret")
    assert interpreter_dot.installed()
    for pos in (1, 10, 19):
        batch = x.clone()
        batch[pos] = x[0]
        got = matmul.linear(batch, w, backend="interpret")[pos : pos + 1]
        assert ulp_distance(got, alone).max() == 0, f"row at position {pos} differs"
