"""Triton kernels of the fused norms: residual-add + RMSNorm, and RMSNorm -> e4m3.

One program per row, and the block width and warps follow the row length only (never the
number of rows), as in ``_rowops_triton``: the row's sum of squares is one in-block tree over a
fixed chunk order, whatever shares the launch. The add runs in fp32 and is rounded to the activation dtype before
it is squared (as vLLM's ``fused_add_rms_norm`` does), and the normalised value is rounded to the
activation dtype before it is quantized, so the reference's numerics are those of the unfused
pair of ops. Imported lazily; under ``TRITON_INTERPRET=1`` the same kernels run on CPU tensors.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._rowops_triton import CHUNK, SINGLE_PASS_MAX, _pow2, _warps, rstd_of, store_normed_chunks
from .fp8 import E4M3, E4M3_MAX, MIN_SCALE
from .keyed_launch import launch


@triton.jit
def _add_rmsnorm_kernel(X, R, W, stride, N, eps, BLOCK: tl.constexpr, SINGLE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride
    r_row = R + row * stride
    cols = tl.arange(0, BLOCK)
    if SINGLE:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        z = (x + tl.load(r_row + cols, mask=mask, other=0.0).to(tl.float32)).to(X.dtype.element_ty)
        tl.store(r_row + cols, z, mask=mask)
        zf = z.to(tl.float32)
        rstd = rstd_of(tl.sum(zf * zf, axis=0), N, eps)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(x_row + cols, (zf * rstd * w).to(X.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            mask = off + cols < N
            x = tl.load(x_row + off + cols, mask=mask, other=0.0).to(tl.float32)
            z = (x + tl.load(r_row + off + cols, mask=mask, other=0.0).to(tl.float32)).to(X.dtype.element_ty)
            tl.store(r_row + off + cols, z, mask=mask)
            zf = z.to(tl.float32)
            acc += zf * zf
        store_normed_chunks(r_row, W, x_row, rstd_of(tl.sum(acc, axis=0), N, eps), N, BLOCK)


@triton.jit
def _rmsnorm_fp8_kernel(X, W, Q, S, stride_x, stride_q, N, eps, qmax, min_scale,
                        BLOCK: tl.constexpr, PER_TOKEN: tl.constexpr):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = rstd_of(tl.sum(x * x, axis=0), N, eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    y = (x * rstd * w).to(X.dtype.element_ty).to(tl.float32)  # the norm's output, in x's dtype
    if PER_TOKEN:
        scale = tl.maximum(tl.max(tl.abs(y), axis=0) / qmax, min_scale)
        tl.store(S + row, scale)
    else:
        scale = tl.load(S)
    q = tl.minimum(tl.maximum(y / scale, -qmax), qmax)
    tl.store(Q + row * stride_q + cols, q.to(Q.dtype.element_ty), mask=mask)


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """In place: ``residual += x``, ``x = rms_norm(residual) * weight`` (row-contiguous 2-D tensors)."""
    m, n = x.shape
    single = n <= SINGLE_PASS_MAX
    block = _pow2(n) if single else CHUNK
    if m:
        launch(_add_rmsnorm_kernel, (m,), (x, residual, weight, x.stride(0), n, float(eps)),
                {"BLOCK": block, "SINGLE": single}, _warps(block))  # fmt: skip


def rmsnorm_fp8(
    x: torch.Tensor, weight: torch.Tensor, eps: float, scale: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q e4m3 [M, H], scale)``: per-token scales ``[M, 1]`` when ``scale`` is None, else the static one."""
    m, n = x.shape
    if n > SINGLE_PASS_MAX:
        raise ValueError(f"rmsnorm-fp8-quant reference: rows up to {SINGLE_PASS_MAX} wide, got {n}")
    q = torch.empty((m, n), dtype=E4M3, device=x.device)
    per_token = scale is None
    s = (torch.empty((m, 1), dtype=torch.float32, device=x.device) if per_token
         else scale.to(device=x.device, dtype=torch.float32).reshape(1, 1).contiguous())  # fmt: skip
    block = _pow2(n)
    if m:
        launch(_rmsnorm_fp8_kernel, (m,),
                (x, weight, q, s, x.stride(0), q.stride(0), n, float(eps), E4M3_MAX, MIN_SCALE),
                {"BLOCK": block, "PER_TOKEN": per_token}, _warps(block))  # fmt: skip
    return q, s
