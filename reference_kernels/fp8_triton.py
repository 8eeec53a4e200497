"""Reference FP8 GEMM in Triton: e4m3 x e4m3 -> fp32 accumulator -> scaled bf16.

Same invariance argument as ``matmul_triton``: one program per output tile,
K walked upward in fixed ``BLOCK_K`` steps into one fp32 accumulator, no
split-K; the decode and large classes share ``BLOCK_K`` and the wgmma
instruction family. The scales are applied once, in the epilogue, in a fixed
order: ``(acc * x_scale[m]) * w_scale``. A per-token scale is a pointer with
row stride 1, a per-tensor scale the same pointer with stride 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._tile_triton import grouped_tile
from .device import cdiv, sm_count
from .interpreted import kernel_for
from .interpreter_dot import install as _install_interpreter_dot
from .matmul_triton import SMALL_M, TileConfig, tile_sum

_install_interpreter_dot()  # CPU tests measure the kernel, not numpy's BLAS (see interpreter_dot)

_LARGE = TileConfig(128, 256, 128, 8, 8, 3)
_BLOCK_K = 128
_INTERPRET = TileConfig(16, 16, 32, 1, 4, 1)


def pick_config(m: int, n: int, device: torch.device, interpret: bool) -> TileConfig:
    """Config by M class and N only (see ``matmul_triton.pick_config``)."""
    if interpret:
        return _INTERPRET
    if m > SMALL_M:
        return _LARGE
    target = 2 * sm_count(device)
    block_n = 128
    while block_n > 16 and cdiv(n, block_n) < target:
        block_n //= 2
    return TileConfig(64, block_n, _BLOCK_K, 1, 4, 5)


@triton.jit
def _fp8_mm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    a_scale_ptr,
    b_scale_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_as,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    num_pid_m = (M + BLOCK_M - 1) // BLOCK_M
    num_pid_n = (N + BLOCK_N - 1) // BLOCK_N
    pid_m, pid_n = grouped_tile(tl.program_id(0), num_pid_m, GROUP_M * num_pid_n, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    mask_m = offs_m[:, None] < M
    mask_n = offs_n[None, :] < N

    acc = tile_sum(a_ptrs, b_ptrs, offs_k, mask_m, mask_n, K, stride_ak, stride_bk, BLOCK_M, BLOCK_N, BLOCK_K,
                   False, None)  # fmt: skip
    a_scale = tl.load(a_scale_ptr + offs_m * stride_as, mask=offs_m < M, other=0.0)
    b_scale = tl.load(b_scale_ptr)
    acc = acc * a_scale[:, None]
    acc = acc * b_scale
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m & mask_n)


def fp8_mm_triton(
    xq: torch.Tensor, wq: torch.Tensor, x_scale: torch.Tensor, w_scale: torch.Tensor
) -> torch.Tensor:
    """``(xq[M, K] @ wq[N, K].T) * x_scale * w_scale`` in bf16; x_scale is [M, 1] or a scalar."""
    m, k = xq.shape
    n = wq.shape[0]
    kernel, interpret = kernel_for(_fp8_mm_kernel, xq.device)
    cfg = pick_config(m, n, xq.device, interpret)
    # Under the interpreter bf16 stores would not round to nearest even (see matmul_triton).
    c = torch.empty((m, n), dtype=torch.float32 if interpret else torch.bfloat16, device=xq.device)
    if m == 0 or n == 0:
        return c.to(torch.bfloat16)
    xs = x_scale.to(torch.float32).reshape(-1)
    stride_as = 0 if xs.numel() == 1 else 1
    if stride_as and xs.numel() != m:
        raise ValueError(f"x_scale must have 1 or M={m} elements, got {xs.numel()}")
    ws = w_scale.to(torch.float32).reshape(-1)[:1].contiguous()
    grid = (cdiv(m, cfg.block_m) * cdiv(n, cfg.block_n),)
    kwargs = {} if interpret else {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    kernel[grid](
        xq,
        wq,
        c,
        xs.contiguous(),
        ws,
        m,
        n,
        k,
        xq.stride(0),
        xq.stride(1),
        wq.stride(1),
        wq.stride(0),
        c.stride(0),
        c.stride(1),
        stride_as,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        GROUP_M=cfg.group_m,
        **kwargs,
    )
    return c.to(torch.bfloat16) if interpret else c
