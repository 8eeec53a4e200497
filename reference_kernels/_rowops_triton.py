"""Triton row kernels: RMSNorm, log-softmax and mean over the last dim.

One program per row, and every configuration (block width, warps) is a
function of the row length only, never of the number of rows: a row is reduced
in the same fixed chunk order, with the same in-block tree, whatever else
shares the launch. That is the whole invariance argument, so the kernels stay
deliberately plain (no split reductions, no atomics, no persistent tiling).

Imported lazily (it imports triton). With ``TRITON_INTERPRET=1`` set before
triton is imported, the same kernels run on CPU tensors under the Triton
interpreter, so CPU tests can run them on tiny shapes.
"""

from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace

import torch
import triton
import triton.language as tl

from .launch import Launcher, aligned

# Rows up to this width are loaded once and kept in registers; wider rows are
# walked in chunks of CHUNK in increasing column order.
SINGLE_PASS_MAX = 16384
CHUNK = 4096


@triton.jit
def rstd_of(sum_sq, N, eps):
    """RMSNorm's ``1 / sqrt(mean(x**2) + eps)`` from a row's fp32 sum of squares (every norm kernel's)."""
    return 1.0 / tl.sqrt(sum_sq / N + eps)


@triton.jit
def store_normed_chunks(src_row, W, dst_row, rstd, N, BLOCK: tl.constexpr):
    """The last pass of a chunked RMSNorm: ``dst = src * rstd * w`` chunk by chunk, in column order."""
    cols = tl.arange(0, BLOCK)
    for off in range(0, N, BLOCK):
        mask = off + cols < N
        x = tl.load(src_row + off + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(W + off + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(dst_row + off + cols, (x * rstd * w).to(dst_row.dtype.element_ty), mask=mask)


def _rmsnorm_kernel(X, W, Y, stride_x, stride_y, N, eps, BLOCK: tl.constexpr, SINGLE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_x
    y_row = Y + row * stride_y
    cols = tl.arange(0, BLOCK)
    if SINGLE:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = rstd_of(tl.sum(x * x, axis=0), N, eps)
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for off in range(0, N, BLOCK):
            mask = off + cols < N
            x = tl.load(x_row + off + cols, mask=mask, other=0.0).to(tl.float32)
            acc += x * x
        store_normed_chunks(x_row, W, y_row, rstd_of(tl.sum(acc, axis=0), N, eps), N, BLOCK)


def _log_softmax_kernel(X, Y, stride_x, stride_y, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_x
    y_row = Y + row * stride_y
    cols = tl.arange(0, BLOCK)
    # pass 1: row max (max is exact in any order, chunked only to bound registers)
    mx = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    for off in range(0, N, BLOCK):
        mask = off + cols < N
        x = tl.load(x_row + off + cols, mask=mask, other=float("-inf")).to(tl.float32)
        mx = tl.maximum(mx, x)
    m = tl.max(mx, axis=0)
    # pass 2: sum of exp in fixed chunk order, lane-wise, then one fixed tree
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        mask = off + cols < N
        x = tl.load(x_row + off + cols, mask=mask, other=float("-inf")).to(tl.float32)
        acc += tl.where(mask, tl.exp(x - m), 0.0)
    lse = m + tl.log(tl.sum(acc, axis=0))
    # pass 3: write
    for off in range(0, N, BLOCK):
        mask = off + cols < N
        x = tl.load(x_row + off + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + off + cols, (x - lse).to(Y.dtype.element_ty), mask=mask)


def _mean_kernel(X, Y, stride_x, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_x
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        mask = off + cols < N
        acc += tl.load(x_row + off + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row, (tl.sum(acc, axis=0) / N).to(Y.dtype.element_ty))


def interpreting() -> bool:
    """Whether triton was imported for its interpreter (``TRITON_INTERPRET=1`` before the import)."""
    return bool(triton.knobs.runtime.interpret)


@lru_cache(maxsize=1)
def kernels(interpret: bool) -> SimpleNamespace:
    """The three kernels, for the GPU or (``interpret``) for the Triton interpreter.

    triton's own library functions (``tl.sum``...) are built for one mode when
    triton is imported, so the interpreter needs ``TRITON_INTERPRET=1`` in the
    environment before that import; asking for the other mode is an error.
    """
    if interpret != interpreting():
        want = "1" if interpret else "0 (unset)"
        raise RuntimeError(
            f"Triton row kernels on {'CPU' if interpret else 'CUDA'} need TRITON_INTERPRET={want} "
            "in the environment before triton is imported"
        )
    return SimpleNamespace(
        rmsnorm=triton.jit(_rmsnorm_kernel),
        log_softmax=triton.jit(_log_softmax_kernel),
        mean=triton.jit(_mean_kernel),
    )


def _warps(block: int) -> int:
    return 4 if block <= 1024 else 8 if block <= 4096 else 16


def _pow2(n: int) -> int:
    """``triton.next_power_of_2`` on the host (the triton helper is JIT-wrapped: microseconds a call)."""
    return 1 << max(0, (n - 1).bit_length())


_launchers: dict = {}


def _launch(kernel, x2: torch.Tensor, out: torch.Tensor, grid: tuple[int], args: tuple, consts: dict, warps: int) -> None:
    """Through ``launch.Launcher`` on CUDA (keyed by what the JIT specializes on), the JIT under the interpreter."""
    key = None
    if x2.is_cuda:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        key = (x2.shape, x2.stride(), out.stride(), x2.device.index, *(t.dtype for t in tensors), *aligned(*tensors))
    got = _launchers.get(kernel)
    if got is None:
        got = _launchers[kernel] = Launcher(kernel)
    got.launch(key, grid, args, consts, {"num_warps": warps})


def rmsnorm(x2: torch.Tensor, w: torch.Tensor, eps: float, out: torch.Tensor) -> torch.Tensor:
    """``out[m] = x2[m] * rsqrt(mean(x2[m]**2) + eps) * w`` for a row-contiguous 2-D ``x2``."""
    m, n = x2.shape
    k = kernels(not x2.is_cuda)
    single = n <= SINGLE_PASS_MAX
    block = _pow2(n) if single else CHUNK
    if m:
        _launch(k.rmsnorm, x2, out, (m,), (x2, w, out, x2.stride(0), out.stride(0), n, float(eps)),
                {"BLOCK": block, "SINGLE": single}, _warps(block))  # fmt: skip
    return out


def log_softmax(x2: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    m, n = x2.shape
    k = kernels(not x2.is_cuda)
    block = min(_pow2(n), CHUNK)
    if m:
        _launch(k.log_softmax, x2, out, (m,), (x2, out, x2.stride(0), out.stride(0), n), {"BLOCK": block}, _warps(block))
    return out


def mean(x2: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    m, n = x2.shape
    k = kernels(not x2.is_cuda)
    block = min(_pow2(n), CHUNK)
    if m:
        _launch(k.mean, x2, out, (m,), (x2, out, x2.stride(0), n), {"BLOCK": block}, _warps(block))
    return out
