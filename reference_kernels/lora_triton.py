"""Reference multi-LoRA in Triton: a shrink program per token, an expand program per (token, N
block). Each program reads its token's adapter id and that adapter's weights only; the sums are
lane-wise over fixed chunks of the reduced axis, then one in-block tree (``tl.sum``), no
``tl.dot`` and no grouping of tokens by adapter, so neither the batch nor which adapters the
neighbours use can move a token's bits. Tokens without an adapter (id -1) keep ``base``'s bits.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .device import cdiv
from .keyed_launch import launch

BLOCK_H = 256
BLOCK_N = 64


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@triton.jit
def _shrink_kernel(X, A, IDS, Y, H, R, stride_x, stride_al, stride_ar, stride_y, scale,
                   BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    lid = tl.maximum(tl.load(IDS + row), 0).to(tl.int64)  # id -1 reads adapter 0; expand drops it
    offs_r = tl.arange(0, BLOCK_R)
    offs_h = tl.arange(0, BLOCK_H)
    acc = tl.zeros((BLOCK_R, BLOCK_H), dtype=tl.float32)
    for off in range(0, H, BLOCK_H):
        h = off + offs_h
        x = tl.load(X + row * stride_x + h, mask=h < H, other=0.0).to(tl.float32)
        a = tl.load(A + lid * stride_al + offs_r[:, None] * stride_ar + h[None, :],
                    mask=(offs_r[:, None] < R) & (h[None, :] < H), other=0.0).to(tl.float32)  # fmt: skip
        acc += a * x[None, :]
    y = tl.sum(acc, axis=1) * scale
    tl.store(Y + row * stride_y + offs_r, y, mask=offs_r < R)


@triton.jit
def _expand_kernel(Y, B, IDS, BASE, OUT, N, R, stride_y, stride_bl, stride_bn, stride_base, stride_out,
                   BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    pid_n = tl.program_id(1)
    lid = tl.load(IDS + row)
    has = lid >= 0
    lid = tl.maximum(lid, 0).to(tl.int64)
    offs_r = tl.arange(0, BLOCK_R)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    y = tl.load(Y + row * stride_y + offs_r, mask=offs_r < R, other=0.0)
    b = tl.load(B + lid * stride_bl + offs_n[:, None] * stride_bn + offs_r[None, :],
                mask=(offs_n[:, None] < N) & (offs_r[None, :] < R), other=0.0).to(tl.float32)  # fmt: skip
    delta = tl.sum(b * y[None, :], axis=1)
    base = tl.load(BASE + row * stride_base + offs_n, mask=offs_n < N, other=0.0)
    out = tl.where(has, (base.to(tl.float32) + delta).to(OUT.dtype.element_ty), base)
    tl.store(OUT + row * stride_out + offs_n, out, mask=offs_n < N)


def lora_triton(x, base, lora_a, lora_b, ids, scale: float) -> torch.Tensor:
    m, h = x.shape
    n, r = base.shape[1], lora_a.shape[1]
    x, base, lora_a, lora_b = x.contiguous(), base.contiguous(), lora_a.contiguous(), lora_b.contiguous()
    ids = ids.to(torch.int64).contiguous()
    y = torch.empty((m, r), dtype=torch.float32, device=x.device)
    out = torch.empty_like(base)
    if m:
        br = _pow2(r)
        launch(_shrink_kernel, (m,), (x, lora_a, ids, y, h, r, x.stride(0), lora_a.stride(0), lora_a.stride(1),
                                      y.stride(0), float(scale)), {"BLOCK_R": br, "BLOCK_H": BLOCK_H}, 4)  # fmt: skip
        launch(_expand_kernel, (m, cdiv(n, BLOCK_N)),
               (y, lora_b, ids, base, out, n, r, y.stride(0), lora_b.stride(0), lora_b.stride(1), base.stride(0),
                out.stride(0)), {"BLOCK_R": br, "BLOCK_N": BLOCK_N}, 4)  # fmt: skip
    return out
