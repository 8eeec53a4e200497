"""int4 weight-only GEMM, group-quantized in GPTQ's layout (group 128, a scale and a zero point
per group and output channel), bf16 activations and output.

Family ``int4-gemm``: ``fn(x[M, K] bf16, qweight int32[K/8, N], scales bf16[K/128, N],
qzeros int32[K/128, N/8]) -> bf16[M, N]``. ``qweight`` packs 8 consecutive input channels of one
output channel (channel ``8r + i`` in bits ``4i..4i+3`` of row ``r``), ``qzeros`` 8 consecutive
output channels of one group; ``w[k, n] = (q[k, n] - z[k/128, n]) * s[k/128, n]``.

Reference numerics: the weight dequantized to bf16 (``(q - z) * s`` in fp32, rounded once), then
a fixed-order GEMM with fp32 accumulation: the 16-row-tiled BLAS of ``matmul_cpu`` on CPU, the
fused dequantize-and-dot Triton kernel of ``int4_triton`` on CUDA (one tile configuration for
every M; K summed in pieces fixed by K alone, so a decode-sized launch may spread them over the SMs
without its bits moving). Stock: dequantize + ``F.linear`` (the fallback without an int4 kernel), and
torch's own int4 kernel (``_weight_int4pack_mm_for_cpu`` on CPU, ``_weight_int4pack_mm`` on CUDA,
whose ``(q - 8) * s + zero`` form takes ``zero = (8 - z) * s``).
"""

from __future__ import annotations

import torch

from . import matmul_cpu
from .device import resolve

GROUP = 128
PACK = 8  # int4 values per int32


def quantize_int4(w: torch.Tensor, group: int = GROUP) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric int4 of ``w[N, K]`` per (group of 128 input channels, output channel), packed as GPTQ."""
    n, k = w.shape
    if k % group or n % PACK:
        raise ValueError(f"int4-gemm wants K % {group} == 0 and N % {PACK} == 0, got K={k}, N={n}")
    wg = w.float().t().reshape(k // group, group, n)  # [G, 128, N]
    lo, hi = wg.amin(dim=1), wg.amax(dim=1)
    scale = ((hi - lo) / 15).clamp(min=1e-8).to(torch.bfloat16)
    zero = torch.round(-lo / scale.float()).clamp(0, 15)
    q = torch.round(wg / scale.float()[:, None] + zero[:, None]).clamp(0, 15).to(torch.int32).reshape(k, n)
    return pack_rows(q), scale, pack_rows(zero.to(torch.int32).t()).t().contiguous()


def pack_rows(q: torch.Tensor) -> torch.Tensor:
    """int32 ``[R/8, C]`` from int4 values ``q[R, C]`` (8 consecutive rows per int32)."""
    r, c = q.shape
    q = q.to(torch.int64).reshape(r // PACK, PACK, c)
    packed = torch.zeros((r // PACK, c), dtype=torch.int64, device=q.device)
    for i in range(PACK):
        packed |= q[:, i] << (4 * i)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def unpack_rows(p: torch.Tensor) -> torch.Tensor:
    """int32 ``[R, C]`` of int4 values from ``p[R/8, C]`` (the inverse of ``pack_rows``)."""
    shifts = torch.arange(0, 4 * PACK, 4, device=p.device, dtype=torch.int32)
    return ((p[:, None, :] >> shifts[None, :, None]) & 0xF).reshape(-1, p.shape[1])


def unpack_weight(qweight: torch.Tensor, qzeros: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q[K, N], z[K/128, N])`` as int32."""
    return unpack_rows(qweight), unpack_rows(qzeros.t().contiguous()).t()


def dequantize(qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor) -> torch.Tensor:
    """``w[K, N]`` in the scales' dtype: ``(q - z) * s`` in fp32, rounded once."""
    q, z = unpack_weight(qweight, qzeros)
    g = q.shape[0] // scales.shape[0]
    zk = z.repeat_interleave(g, dim=0)
    sk = scales.float().repeat_interleave(g, dim=0)
    return ((q - zk).float() * sk).to(scales.dtype)


def int4_linear(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor, *, backend: str | None = None
) -> torch.Tensor:
    """Reference int4 weight-only linear (bf16 dequantized weight, fixed-order fp32 accumulation)."""
    if x.dim() != 2 or qweight.shape[0] * PACK != x.shape[1]:
        raise ValueError(f"expected x[M, K] and qweight[K/8, N], got {tuple(x.shape)} and {tuple(qweight.shape)}")
    if resolve(x, backend, torch_on_cuda=False) != "torch":
        from .int4_triton import int4_mm_triton

        return int4_mm_triton(x, qweight, scales, qzeros)
    return matmul_cpu.mm_tiled(x, dequantize(qweight, scales, qzeros).to(x.dtype))


def int4_linear_interpret(x, qweight, scales, qzeros):
    return int4_linear(x, qweight, scales, qzeros, backend="interpret")


def stock_dequant_linear(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor):
    """Stock fallback: the same bf16 dequantized weight, then ``F.linear`` (cuBLAS / CPU BLAS)."""
    return torch.nn.functional.linear(x, dequantize(qweight, scales, qzeros).to(x.dtype).t())


_packed: dict = {}


def _int4pack(qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor):
    """torch's packed weight and ``scales_and_zeros[K/128, N, 2]``, made once per weight."""
    key = (qweight.data_ptr(), scales.data_ptr(), qzeros.data_ptr(), tuple(qweight.shape), qweight.device)
    got = _packed.get(key)
    if got is None:
        q, z = unpack_weight(qweight, qzeros)
        s = scales.float()
        sz = torch.stack([s, (8 - z).float() * s], dim=-1).to(torch.bfloat16).contiguous()
        qn = q.t().contiguous()  # [N, K]
        if qweight.is_cuda:
            # tinygemm's input: [N, K/2] uint8, the even channel in the high nibble (as torchao packs it)
            packed = torch.ops.aten._convert_weight_to_int4pack(((qn[:, ::2] << 4) | qn[:, 1::2]).to(torch.uint8), 8)
        else:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(qn, 1)
        got = _packed[key] = (packed, sz)
        if len(_packed) > 16:
            _packed.pop(next(iter(_packed)))
    return got


def stock_int4pack(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor):
    """Stock: torch's int4 weight-only kernel (tinygemm on CUDA, the CPU kernel of torchao's int4 path)."""
    packed, sz = _int4pack(qweight, scales, qzeros)
    group = qweight.shape[0] * PACK // scales.shape[0]
    if x.is_cuda:
        return torch.ops.aten._weight_int4pack_mm(x, packed, group, sz)
    return torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group, sz)


_dequantized: dict = {}


def int4pack_dequantized(packed: torch.Tensor, group: int, scales_and_zeros: torch.Tensor, dtype: torch.dtype,
                         k: int) -> torch.Tensor:  # fmt: skip
    """``w[K, N]`` in ``dtype`` of one of torch's packed int4 weights, made once per weight (and version).

    torch's packed layout is its own; its kernel on an identity ``I[K, K]`` returns each input
    channel's dequantized weights exactly (one non-zero term per sum), rounded once to ``dtype``.
    Called inside the mode switch, so that call reaches torch's own kernel."""
    key = (packed.data_ptr(), packed._version, scales_and_zeros.data_ptr(), scales_and_zeros._version, group,
           dtype, k, packed.device)  # fmt: skip
    got = _dequantized.get(key)
    if got is None:
        eye = torch.eye(k, dtype=dtype, device=packed.device)
        op = torch.ops.aten._weight_int4pack_mm if packed.is_cuda else torch.ops.aten._weight_int4pack_mm_for_cpu
        got = _dequantized[key] = op(eye, packed, group, scales_and_zeros)
        if len(_dequantized) > 64:
            _dequantized.pop(next(iter(_dequantized)))
    return got
