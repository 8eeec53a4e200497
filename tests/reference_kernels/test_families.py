"""The six newer families' reference kernels: semantics (in place, id -1, packing, scales),
accuracy against plain float64 math, and what their suites rely on (scan prefill == chunked ==
decode bitwise on CPU). The invariance verdicts themselves come from the suites (suites/ops)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_invariance.oracles.inputs import rows_pool  # noqa: E402
from pytest_invariance.reference_kernels import fp8_block, fused_norm, int4, linear_attention, lora  # noqa: E402


def test_add_rmsnorm_is_in_place_and_matches_the_unfused_ops():
    x, r = rows_pool(5, (96,), 1, torch.bfloat16), rows_pool(5, (96,), 2, torch.bfloat16)
    w = rows_pool(1, (96,), 3, torch.bfloat16)[0]
    xc, rc = x.clone(), r.clone()
    out, res = fused_norm.add_rms_norm(xc, rc, w, 1e-6)
    assert out is xc and res is rc
    z = x + r
    assert torch.equal(res, z)
    want = torch.nn.functional.rms_norm(z.double(), (96,), w.double(), 1e-6)
    assert (out.double() - want).abs().max() <= 2 ** -6 * want.abs().max()


@pytest.mark.parametrize("static", [False, True])
def test_rmsnorm_fp8_scales_are_row_local_or_static(static):
    x, w = rows_pool(6, (64,), 4, torch.bfloat16), torch.ones(64, dtype=torch.bfloat16)
    scale = torch.tensor(0.01) if static else None
    q, s = fused_norm.rms_norm_fp8_quant(x, w, 1e-6, scale)
    assert q.dtype == torch.float8_e4m3fn and s.shape == ((1, 1) if static else (6, 1))
    loud = x.clone()
    loud[3] *= 100
    q2, s2 = fused_norm.rms_norm_fp8_quant(loud, w, 1e-6, scale)
    assert torch.equal(q2[0].view(torch.uint8), q[0].view(torch.uint8)) and torch.equal(s2[0], s[0])
    y = fused_norm.rms_norm_fp8_quant(x, w, 1e-6, scale)
    assert torch.equal(y[0].view(torch.uint8), q.view(torch.uint8))


def test_fp8_block_quantization_and_gemm_accuracy():
    w = rows_pool(200, (300,), 5)  # partial blocks on both axes
    wq, ws = fp8_block.quantize_weight_blocks(w)
    assert wq.shape == (200, 300) and ws.shape == (2, 3)
    assert (fp8_block.dequantize_weight(wq, ws) - w).abs().max() <= ws.max() * 16
    x = rows_pool(7, (300,), 6)
    xq, xs = fp8_block.quantize_groups(x)
    assert xs.shape == (7, 3) and torch.equal(fp8_block.quantize_groups(x[:1])[1], xs[:1])
    got = fp8_block.fp8_block_linear(x, wq, ws).double()
    xd = xq.double() * xs.double().repeat_interleave(128, 1)[:, :300]
    want = xd @ fp8_block.dequantize_weight(wq, ws).double().t()
    assert (got - want).abs().max() <= 2 ** -7 * want.abs().max()


@pytest.mark.parametrize("m", [1, 5])
def test_blockwise_scaled_mm_scale_layouts_pass_torchs_shape_and_stride_checks(m):
    """The layouts the H200 run rejected (M == 1 strides, weight scales not transposed), checked
    against torch's own meta registration of ``scaled_mm`` (full blocks: its meta floors N/128)."""
    F = torch.nn.functional
    if not hasattr(F, "ScalingType"):
        pytest.skip(f"torch {torch.__version__} has no block-scaled F.scaled_mm")
    n, k = 1536, 7168
    sa, sb = fp8_block.blockwise_scale_operands(torch.rand(m, k // 128), torch.rand(n // 128, k // 128))
    xq = torch.empty(m, k, dtype=fp8_block.E4M3, device="meta")
    w = torch.empty(n, k, dtype=fp8_block.E4M3, device="meta")
    out = F.scaled_mm(xq, w.t(), sa.to("meta"), F.ScalingType.BlockWise1x128, sb.to("meta"),
                      F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)  # fmt: skip
    assert out.shape == (m, n) and sa.stride() == (1, m) and sb.shape == (k // 128, n // 128)


def test_int4_packing_round_trips_and_gemm_matches_dequantized_math():
    q = torch.randint(0, 16, (256, 32), dtype=torch.int32)
    assert torch.equal(int4.unpack_rows(int4.pack_rows(q)), q)
    w = rows_pool(32, (256,), 7)  # torch's CPU int4pack wants N % 16 == 0
    qw, s, qz = int4.quantize_int4(w)
    assert qw.shape == (32, 32) and s.shape == (2, 32) and qz.shape == (2, 4)
    wd = int4.dequantize(qw, s, qz)
    assert (wd.float().t() - w).abs().amax() <= s.float().amax() * 0.51 + 2 ** -7 * w.abs().amax()
    x = rows_pool(5, (256,), 8, torch.bfloat16)
    want = x.double() @ wd.double()
    for fn in (int4.int4_linear, int4.stock_dequant_linear, int4.stock_int4pack):
        assert (fn(x, qw, s, qz).double() - want).abs().max() <= 2 ** -6 * want.abs().max(), fn.__name__


def test_lora_rows_without_an_adapter_keep_base_bits_and_others_match_float64():
    x, base = rows_pool(6, (64,), 9, torch.bfloat16), rows_pool(6, (32,), 10, torch.bfloat16)
    a, b = rows_pool(3, (8, 64), 11, torch.bfloat16) / 8, rows_pool(3, (32, 8), 12, torch.bfloat16) / 3
    ids = torch.tensor([0, -1, 2, 1, -1, 0])
    out = lora.lora_apply(x, base, a, b, ids, 0.5)
    assert torch.equal(out[ids < 0].view(torch.int16), base[ids < 0].view(torch.int16))
    for i in (0, 2, 3, 5):
        want = base[i].double() + 0.5 * (b[ids[i]].double() @ (a[ids[i]].double() @ x[i].double()))
        assert (out[i].double() - want).abs().max() <= 2 ** -7 * want.abs().max() + 1e-3
    assert torch.equal(lora.stock_bgmv(x, base, a, b, ids, 0.5)[1], base[1])


def _seq(b=2, t=40, h=2, d=8):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, t, h, d, generator=g).bfloat16() for _ in range(3))
    return q, k, v, -(torch.rand(b, t, h, generator=g) * 0.3 + 0.01)


def test_scan_reference_equals_itself_chunked_and_decoded_bitwise_and_matches_chunked_math():
    q, k, v, g = _seq()
    o, s = linear_attention.scan(q, k, v, g)
    o1, s1 = linear_attention.scan(q[:, :17], k[:, :17], v[:, :17], g[:, :17])
    o2, s2 = linear_attention.scan(q[:, 17:39], k[:, 17:39], v[:, 17:39], g[:, 17:39], s1)
    o3, s3 = linear_attention.scan(q[:, 39:], k[:, 39:], v[:, 39:], g[:, 39:], s2)  # a decode step
    assert torch.equal(torch.cat([o1, o2, o3], 1).view(torch.int16), o.view(torch.int16))
    assert torch.equal(s3.view(torch.int32), s.view(torch.int32))
    oc, sc = linear_attention.chunked_scan(q, k, v, g, chunk=16)
    assert (oc.float() - o.float()).abs().max() <= 2 ** -6 * o.float().abs().max()
    assert (sc - s).abs().max() <= 1e-4 * s.abs().max()
    od, sd = linear_attention.recurrent_step(q[:, :1], k[:, :1], v[:, :1], g[:, :1], torch.zeros_like(s))
    assert (od.float() - o[:, :1].float()).abs().max() <= 2 ** -7 * o[:, :1].float().abs().max() + 1e-6


def test_bad_shapes_are_one_line_errors():
    with pytest.raises(ValueError, match="residual must match"):
        fused_norm.add_rms_norm(torch.zeros(2, 8), torch.zeros(3, 8), torch.ones(8))
    with pytest.raises(ValueError, match="int4-gemm wants"):
        int4.quantize_int4(torch.zeros(8, 100))
    with pytest.raises(ValueError, match="expected x"):
        lora.lora_apply(torch.zeros(2, 8), torch.zeros(3, 4), torch.zeros(1, 2, 8), torch.zeros(1, 4, 2), torch.zeros(2))
    with pytest.raises(ValueError, match="state must be"):
        linear_attention.scan(*_seq(t=3), torch.zeros(1, 1, 1, 1))


def test_enable_routes_torch_int4pack_to_the_reference_and_rows_stop_seeing_the_batch():
    from pytest_invariance.oracles.batch import batch_size_oracle
    from pytest_invariance.reference_kernels import enable

    qw, s, qz = int4.quantize_int4(rows_pool(64, (256,), 13))
    packed, sz = int4._int4pack(qw, s, qz)
    x = rows_pool(33, (256,), 14, torch.bfloat16)

    def op(rows):
        return torch.ops.aten._weight_int4pack_mm_for_cpu(rows, packed, 128, sz)

    stock = op(x)
    with enable():
        routed = op(x)
        res = batch_size_oracle(op, x, [1, 2, 3, 8, 9, 16, 17, 33])
    assert not res.diverged
    assert (routed.double() - stock.double()).abs().max() <= 2 ** -6 * stock.double().abs().max()
