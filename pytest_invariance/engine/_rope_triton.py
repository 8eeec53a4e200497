"""The Triton kernel behind ``RoPE.query_key`` on CUDA (imported only there: CPU torch has no triton)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..reference_kernels.launch import Launcher, aligned


@triton.jit
def _rope_kernel(QKV, COS, SIN, POS, QO, KO, stride_t, HQ, HKV, HALF: tl.constexpr, BLOCK: tl.constexpr):
    """Program (token, head): heads ``[0, HQ)`` are queries, ``[HQ, HQ + HKV)`` keys."""
    t = tl.program_id(0)
    h = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    m = offs < HALF
    pos = tl.load(POS + t).to(tl.int64)
    cos = tl.load(COS + pos * HALF + offs, mask=m, other=0.0)
    sin = tl.load(SIN + pos * HALF + offs, mask=m, other=0.0)
    src = QKV + t.to(tl.int64) * stride_t + h * (2 * HALF)
    x1 = tl.load(src + offs, mask=m, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF + offs, mask=m, other=0.0).to(tl.float32)
    o1 = (x1 * cos - x2 * sin).to(QO.dtype.element_ty)
    o2 = (x2 * cos + x1 * sin).to(QO.dtype.element_ty)
    hv = tl.zeros([BLOCK], tl.int32) + h  # the head as a vector: masks are tensors
    qm = m & (hv < HQ)
    km = m & (hv >= HQ)
    qdst = QO + (t.to(tl.int64) * HQ + tl.minimum(h, HQ - 1)) * (2 * HALF)
    kdst = KO + (t.to(tl.int64) * HKV + tl.maximum(h - HQ, 0)) * (2 * HALF)
    tl.store(qdst + offs, o1, mask=qm)
    tl.store(qdst + HALF + offs, o2, mask=qm)
    tl.store(kdst + offs, o1, mask=km)
    tl.store(kdst + HALF + offs, o2, mask=km)


_launcher = Launcher(_rope_kernel)


def rotate_query_key(qkv: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     heads: int, kv_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """One launch: q [T, heads, D] and k [T, kv_heads, D] rotated, bit-identical to the torch form."""
    t = qkv.shape[0]
    half = head_dim // 2
    q = torch.empty((t, heads, head_dim), device=qkv.device, dtype=qkv.dtype)
    k = torch.empty((t, kv_heads, head_dim), device=qkv.device, dtype=qkv.dtype)
    if t == 0:
        return q, k
    if qkv.stride(-1) != 1:
        raise ValueError("qkv must be contiguous along the hidden dimension")
    pos = (positions if positions.dtype in (torch.int32, torch.int64) else positions.long()).contiguous()
    key = (t, heads, kv_heads, head_dim, qkv.stride(0), qkv.dtype, pos.dtype, qkv.device.index,
           *aligned(qkv, cos, sin, pos, q, k))  # fmt: skip
    _launcher.launch(key, (t, heads + kv_heads), (qkv, cos, sin, pos, q, k, qkv.stride(0), heads, kv_heads),
                     {"HALF": half, "BLOCK": triton.next_power_of_2(half)},
                     {"num_warps": 1, "enable_fp_fusion": False})  # fmt: skip
    return q, k
