"""GPU: the six newer families' Triton reference kernels against their torch paths (same math;
bf16 rounding may differ by an ulp), the scan's prefill == chunked == decode bitwise on CUDA,
and the stock paths that need a GPU (block-scaled F.scaled_mm, tinygemm int4) where they run."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA needed")]

from pytest_invariance.oracles.inputs import rows_pool  # noqa: E402
from pytest_invariance.reference_kernels import fp8_block, fused_norm, int4, linear_attention, lora  # noqa: E402


def _close(a, b, rel=2**-6):
    a, b = a.double().cpu(), b.double().cpu()
    assert (a - b).abs().max() <= rel * b.abs().max() + 1e-6


def test_fused_norms_triton_match_torch():
    x, r = rows_pool(33, (4096,), 1, torch.bfloat16, "cuda"), rows_pool(33, (4096,), 2, torch.bfloat16, "cuda")
    w = rows_pool(1, (4096,), 3, torch.bfloat16, "cuda")[0]
    a = fused_norm.add_rms_norm(x.clone(), r.clone(), w, 1e-6)
    b = fused_norm.add_rms_norm(x.clone(), r.clone(), w, 1e-6, backend="torch")
    _close(a[0], b[0])
    assert torch.equal(a[1], b[1])
    for scale in (None, torch.tensor(0.05, device="cuda")):
        q1, s1 = fused_norm.rms_norm_fp8_quant(x, w, 1e-6, scale)
        q2, s2 = fused_norm.rms_norm_fp8_quant(x, w, 1e-6, scale, backend="torch")
        _close(q1.float() * s1, q2.float() * s2, 2**-3)


def test_quant_gemms_triton_match_torch_and_stocks():
    x = rows_pool(65, (1024,), 4, torch.bfloat16, "cuda")
    wq, ws = fp8_block.quantize_weight_blocks(rows_pool(320, (1024,), 5, device="cuda"))
    ref = fp8_block.fp8_block_linear(x, wq, ws)
    _close(ref, fp8_block.block_mm_torch(*fp8_block.quantize_groups(x), wq, ws))
    _close(ref, fp8_block.stock_dequant_linear(x, wq, ws), 2**-5)
    qw = int4.quantize_int4(rows_pool(256, (1024,), 6, device="cuda"))
    ref = int4.int4_linear(x, *qw)
    _close(ref, x.double() @ int4.dequantize(*qw).double())
    _close(ref, int4.stock_int4pack(x, *qw), 2**-5)


def test_block_scaled_mm_stock_matches_the_reference_where_the_library_runs_it():
    """Skipped, with cuBLASLt's words, where torch or the library refuses it (torch 2.11+cu130 on H200)."""
    from pytest_invariance.reference_kernels.device import library_refusal

    x = rows_pool(65, (1024,), 4, torch.bfloat16, "cuda")
    wq, ws = fp8_block.quantize_weight_blocks(rows_pool(320, (1024,), 5, device="cuda"))
    why = fp8_block.scaled_mm_blockwise_unavailable("cuda") or library_refusal(
        lambda: fp8_block.stock_scaled_mm_blockwise(x[:1], wq, ws))
    if why:
        pytest.skip(f"torch-scaled-mm unsupported: {why}")
    _close(fp8_block.fp8_block_linear(x, wq, ws), fp8_block.stock_scaled_mm_blockwise(x, wq, ws), 2**-5)


def test_lora_and_scan_triton_match_torch_and_scan_decode_is_bitwise():
    x, base = rows_pool(9, (512,), 7, torch.bfloat16, "cuda"), rows_pool(9, (256,), 8, torch.bfloat16, "cuda")
    a, b = rows_pool(3, (16, 512), 9, torch.bfloat16, "cuda") / 20, rows_pool(3, (256, 16), 10, torch.bfloat16, "cuda") / 4
    ids = torch.tensor([0, -1, 2, 1, -1, 0, 0, 2, 1], device="cuda")
    got = lora.lora_apply(x, base, a, b, ids, 0.5)
    _close(got, lora.lora_apply(x, base, a, b, ids, 0.5, backend="torch"))
    assert torch.equal(got[ids < 0], base[ids < 0])
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(3, 70, 4, 64, generator=g, device="cuda").bfloat16() for _ in range(3))
    gg = -(torch.rand(3, 70, 4, generator=g, device="cuda") * 0.3 + 0.01)
    o, s = linear_attention.scan(q, k, v, gg)
    _close(o, linear_attention.scan(q, k, v, gg, backend="torch")[0])
    o1, s1 = linear_attention.scan(q[:, :69], k[:, :69], v[:, :69], gg[:, :69])
    o2, s2 = linear_attention.scan(q[:, 69:], k[:, 69:], v[:, 69:], gg[:, 69:], s1)
    assert torch.equal(torch.cat([o1, o2], 1), o) and torch.equal(s2, s)


@pytest.mark.parametrize("pieces", [(256, 256), (300, 212), (504, 1, 1, 1, 1, 1, 1, 1, 1)])
def test_scan_pieces_of_the_h200_divergence_equal_the_whole_prefill_bitwise(pieces):
    """The splits the first H200 run diverged on (T % 16 == 0 pieces with a state, decode after a
    T % 16 != 0 prefill): one binary without FMA contraction makes them bitwise equal."""
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(2, 512, 8, 64, generator=g, device="cuda").bfloat16() for _ in range(3))
    gg = -(torch.rand(2, 512, 8, generator=g, device="cuda") * 0.29 + 0.01)
    o, s = linear_attention.scan(q, k, v, gg)
    outs, st, lo = [], None, 0
    for n in pieces:
        oi, st = linear_attention.scan(q[:, lo : lo + n], k[:, lo : lo + n], v[:, lo : lo + n], gg[:, lo : lo + n], st)
        outs.append(oi)
        lo += n
    assert torch.equal(torch.cat(outs, 1).view(torch.int16), o.view(torch.int16))
    assert torch.equal(st.view(torch.int32), s.view(torch.int32))
