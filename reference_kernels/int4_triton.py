"""Reference int4 weight-only GEMM in Triton: one program per output tile, K walked upward one
128-channel group at a time; each group's packed int4 weights are unpacked, dequantized to bf16
(``(q - z) * s`` in fp32, rounded once, as the torch path does) and fed to ``tl.dot`` with an fp32
accumulator. One tile configuration for every M and no split-K: the Marlin-style K split by
batch size is exactly what this avoids (``mutants/int4_splitk``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .device import cdiv
from .interpreter_dot import install as _install_interpreter_dot
from .keyed_launch import launch

_install_interpreter_dot()

GPU_TILE = (64, 128, 128, 4, 3)  # BLOCK_M, BLOCK_N, BLOCK_K (= the group), warps, stages
INTERPRET_TILE = (16, 32, 128, 1, 1)


@triton.jit
def _int4_kernel(A, QW, S, QZ, C, M, N, K, stride_am, stride_qw, stride_s, stride_qz, stride_cm,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g in range(0, K // BLOCK_K):
        k = g * BLOCK_K + offs_k
        a = tl.load(A + offs_m[:, None] * stride_am + k[None, :], mask=mask_m[:, None], other=0.0)
        packed = tl.load(QW + (k[:, None] // 8) * stride_qw + offs_n[None, :], mask=mask_n[None, :], other=0)
        q = (packed >> ((k[:, None] % 8) * 4)) & 0xF
        zp = tl.load(QZ + g * stride_qz + offs_n // 8, mask=mask_n, other=0)
        z = (zp >> ((offs_n % 8) * 4)) & 0xF
        s = tl.load(S + g * stride_s + offs_n, mask=mask_n, other=0.0).to(tl.float32)
        w = ((q - z[None, :]).to(tl.float32) * s[None, :]).to(A.dtype.element_ty)
        acc = tl.dot(a, w, acc)
    tl.store(C + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(C.dtype.element_ty),
             mask=mask_m[:, None] & mask_n[None, :])  # fmt: skip


def int4_mm_triton(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor) -> torch.Tensor:
    """``x[M, K] @ dequant(qweight)`` in x's dtype (fp32 accumulation)."""
    m, k = x.shape
    n = qweight.shape[1]
    if k % 128 or k // scales.shape[0] != 128:
        raise ValueError(f"int4-gemm reference kernel: group 128 only, got K={k} with {scales.shape[0]} groups")
    interpret = not x.is_cuda
    bm, bn, bk, warps, stages = INTERPRET_TILE if interpret else GPU_TILE
    c = torch.empty((m, n), dtype=torch.float32 if interpret else x.dtype, device=x.device)
    if m and n:
        x, qweight, scales, qzeros = x.contiguous(), qweight.contiguous(), scales.contiguous(), qzeros.contiguous()
        launch(_int4_kernel, (cdiv(m, bm), cdiv(n, bn)),
               (x, qweight, scales, qzeros, c, m, n, k, x.stride(0), qweight.stride(0), scales.stride(0),
                qzeros.stride(0), c.stride(0)), {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, warps, stages)  # fmt: skip
    return c.to(x.dtype)
