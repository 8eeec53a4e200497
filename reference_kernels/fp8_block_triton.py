"""Reference block-FP8 GEMM in Triton: one program per output tile, K walked upward one 128-wide
scale block at a time; each block's e4m3 dot product (a fresh fp32 tile) is scaled by the
token's group scale and the weight block's scale and added to one fp32 accumulator. One tile
configuration for every M (no M classes, no split-K), so a row's arithmetic never depends on how
many rows share the launch. ``BLOCK_N`` divides 128, so a tile never straddles two weight blocks.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._tile_triton import tile_offsets
from .device import cdiv
from .interpreter_dot import install as _install_interpreter_dot
from .keyed_launch import launch

_install_interpreter_dot()

GPU_TILE = (64, 128, 128, 4, 3)  # BLOCK_M, BLOCK_N, BLOCK_K (= the scale block), warps, stages
INTERPRET_TILE = (16, 32, 128, 1, 1)


@triton.jit
def _fp8_block_kernel(A, B, C, AS, BS, M, N, K, KB, stride_am, stride_bn, stride_cm, stride_asm, stride_bsn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m, offs_n, offs_k, mask_m, mask_n = tile_offsets(pid_m, pid_n, M, N, BLOCK_M, BLOCK_N, BLOCK_K)
    n_block = (pid_n * BLOCK_N) // BLOCK_K  # the weight scale block of this tile (BLOCK_N divides 128)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, KB):
        k = kb * BLOCK_K + offs_k
        a = tl.load(A + offs_m[:, None] * stride_am + k[None, :], mask=mask_m[:, None] & (k[None, :] < K), other=0.0)
        b = tl.load(B + offs_n[None, :] * stride_bn + k[:, None], mask=mask_n[None, :] & (k[:, None] < K), other=0.0)
        part = tl.dot(a, b, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32))
        a_s = tl.load(AS + offs_m * stride_asm + kb, mask=mask_m, other=0.0)
        b_s = tl.load(BS + n_block * stride_bsn + kb)
        acc += (part * a_s[:, None]) * b_s
    tl.store(C + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(C.dtype.element_ty),
             mask=mask_m[:, None] & mask_n[None, :])  # fmt: skip


def fp8_block_mm_triton(xq: torch.Tensor, xs: torch.Tensor, wq: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """bf16 ``[M, N]`` from e4m3 ``xq[M, K]`` (group scales ``xs[M, K/128]``) and ``wq[N, K]`` (block scales)."""
    m, k = xq.shape
    n = wq.shape[0]
    interpret = not xq.is_cuda
    bm, bn, bk, warps, stages = INTERPRET_TILE if interpret else GPU_TILE
    # Under the interpreter a bf16 store truncates instead of rounding to nearest even: keep fp32 there.
    c = torch.empty((m, n), dtype=torch.float32 if interpret else torch.bfloat16, device=xq.device)
    if m and n:
        xs, ws, wq, xq = xs.contiguous(), w_scale.contiguous(), wq.contiguous(), xq.contiguous()
        launch(_fp8_block_kernel, (cdiv(m, bm), cdiv(n, bn)),
               (xq, wq, c, xs, ws, m, n, k, cdiv(k, bk), xq.stride(0), wq.stride(0), c.stride(0), xs.stride(0),
                ws.stride(0)), {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, warps, stages)  # fmt: skip
    return c.to(torch.bfloat16)
