"""Fused-MoE Triton kernels with one fixed tile configuration (batch-invariant).

Pipeline: (1) align: (token, slot) pairs are stably sorted by expert and each
expert's run padded to a multiple of BLOCK_M, so every tile belongs to one
expert; (2) grouped GEMM 1 with the SwiGLU epilogue (gate and up tiles in the
same program); (3) grouped GEMM 2; (4) weighted combine of the k slots in slot
order in fp32. The grid is sized from an upper bound, so nothing syncs with the
host. A pair's bits never depend on the other pairs: the tile shape is a
constant (not chosen from M or from the expert's token count), the K loop runs
in one fixed order, and there is no split-K; only *where* a pair sits in a
tile changes with the batch, and a row of a tile product does not depend on
the tile's other rows.

FP8 (float8_e4m3fn) experts take activations quantized per token (per pair for
the intermediate) and per-output-channel weight scales applied in the epilogue.
Runs on CUDA, or on CPU tensors under ``TRITON_INTERPRET=1`` (tests, tiny shapes).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from ..device import cdiv
from ..interpreter_dot import install as _install_interpreter_dot
from .experts_torch import check_shapes, combine, quantize_rows

_install_interpreter_dot()  # CPU tests measure the kernel, not numpy's BLAS (see interpreter_dot)

# The one tile configuration. Changing it changes bits (not invariance).
BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 64
NUM_WARPS, NUM_STAGES = 4, 3
# Under TRITON_INTERPRET=1 (triton 3.9), tl.dot on bf16 tiles returns garbage
# (measured: errors ~1e10 on a 16x16 product); operands are then upcast to fp32
# first, which keeps the math (exact bf16 products, fp32 sums). Never on a GPU.
_UPCAST = os.environ.get("TRITON_INTERPRET", "0") == "1"


def align(ids: torch.Tensor, n_experts: int, block_m: int = BLOCK_M) -> tuple[torch.Tensor, torch.Tensor]:
    """Pairs sorted by expert, each expert padded to ``block_m``; no host sync.

    Returns ``pairs`` (int32, length = grid bound * block_m; padding holds
    T*k, an out-of-range pair) and ``block_expert`` (int32 per tile; -1 = idle tile).
    """
    flat = ids.reshape(-1)
    n_pairs = flat.numel()
    n_blocks = cdiv(n_pairs, block_m) + n_experts
    order = torch.sort(flat, stable=True).indices
    counts = torch.bincount(flat, minlength=n_experts)
    padded = (counts + block_m - 1) // block_m * block_m
    start = torch.cumsum(counts, 0) - counts
    pend = torch.cumsum(padded, 0)
    pstart = pend - padded
    sorted_e = flat[order]
    rank = torch.arange(n_pairs, device=flat.device) - start[sorted_e]
    dest = pstart[sorted_e] + rank
    pairs = torch.full((n_blocks * block_m,), n_pairs, dtype=torch.int32, device=flat.device)
    pairs[dest] = order.to(torch.int32)
    block_starts = torch.arange(n_blocks, device=flat.device) * block_m
    be = torch.searchsorted(pend, block_starts, right=True)
    block_expert = torch.where(be < n_experts, be, -1).to(torch.int32)
    return pairs, block_expert


@triton.jit
def _a_tile(a_ptr, rows, valid, kk, kmask, stride_am):
    """A ``[BM, BK]`` K step of the activation rows ``rows`` (rows of padding pairs load zeros)."""
    return tl.load(
        a_ptr + rows[:, None].to(tl.int64) * stride_am + kk[None, :],
        mask=valid[:, None] & kmask[None, :],
        other=0.0,
    )


@triton.jit
def _w_tile(w_base, rn, kk, nmask, kmask, stride_wn):
    """A ``[BK, BN]`` K step of output channels ``rn`` of one expert's weight (``[N, K]`` rows)."""
    return tl.load(
        w_base + rn[None, :] * stride_wn + kk[:, None], mask=nmask[None, :] & kmask[:, None], other=0.0
    )


@triton.jit
def _gemm_swiglu_kernel(
    a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, out_ptr, pairs_ptr, block_expert_ptr,
    n_pairs, top_k, K, N_INTER,
    stride_am, stride_we, stride_wn, stride_ws_e, stride_om,
    A_PER_PAIR: tl.constexpr, FP8: tl.constexpr, UPCAST: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(block_expert_ptr + pid_m)
    if e < 0:
        return
    rm = pid_m * BM + tl.arange(0, BM)
    pair = tl.load(pairs_ptr + rm)
    valid = pair < n_pairs
    row = tl.where(A_PER_PAIR, pair, pair // top_k)
    rn = pid_n * BN + tl.arange(0, BN)
    nmask = rn < N_INTER
    rk = tl.arange(0, BK)
    acc_g = tl.zeros((BM, BN), dtype=tl.float32)
    acc_u = tl.zeros((BM, BN), dtype=tl.float32)
    w_base = w_ptr + e.to(tl.int64) * stride_we
    for k0 in range(0, K, BK):
        kk = k0 + rk
        kmask = kk < K
        a = _a_tile(a_ptr, row, valid, kk, kmask, stride_am)
        wg = _w_tile(w_base, rn, kk, nmask, kmask, stride_wn)
        wu = tl.load(
            w_base + (rn[None, :] + N_INTER) * stride_wn + kk[:, None],
            mask=nmask[None, :] & kmask[:, None],
            other=0.0,
        )
        if UPCAST:
            a, wg, wu = a.to(tl.float32), wg.to(tl.float32), wu.to(tl.float32)
        acc_g = tl.dot(a, wg, acc_g)
        acc_u = tl.dot(a, wu, acc_u)
    if FP8:
        a_s = tl.load(a_scale_ptr + row, mask=valid, other=0.0)
        sg = tl.load(w_scale_ptr + e * stride_ws_e + rn, mask=nmask, other=0.0)
        su = tl.load(w_scale_ptr + e * stride_ws_e + rn + N_INTER, mask=nmask, other=0.0)
        acc_g = acc_g * a_s[:, None] * sg[None, :]
        acc_u = acc_u * a_s[:, None] * su[None, :]
    act = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    optr = out_ptr + pair[:, None].to(tl.int64) * stride_om + rn[None, :]
    tl.store(optr, act.to(out_ptr.dtype.element_ty), mask=valid[:, None] & nmask[None, :])


@triton.jit
def _gemm_kernel(
    a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, out_ptr, pairs_ptr, block_expert_ptr,
    n_pairs, K, N,
    stride_am, stride_we, stride_wn, stride_ws_e, stride_om,
    FP8: tl.constexpr, UPCAST: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(block_expert_ptr + pid_m)
    if e < 0:
        return
    rm = pid_m * BM + tl.arange(0, BM)
    pair = tl.load(pairs_ptr + rm)
    valid = pair < n_pairs
    rn = pid_n * BN + tl.arange(0, BN)
    nmask = rn < N
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    w_base = w_ptr + e.to(tl.int64) * stride_we
    for k0 in range(0, K, BK):
        kk = k0 + rk
        kmask = kk < K
        a = _a_tile(a_ptr, pair, valid, kk, kmask, stride_am)
        w = _w_tile(w_base, rn, kk, nmask, kmask, stride_wn)
        if UPCAST:
            a, w = a.to(tl.float32), w.to(tl.float32)
        acc = tl.dot(a, w, acc)
    if FP8:
        a_s = tl.load(a_scale_ptr + pair, mask=valid, other=0.0)
        ws = tl.load(w_scale_ptr + e * stride_ws_e + rn, mask=nmask, other=0.0)
        acc = acc * a_s[:, None] * ws[None, :]
    optr = out_ptr + pair[:, None].to(tl.int64) * stride_om + rn[None, :]
    tl.store(optr, acc, mask=valid[:, None] & nmask[None, :])


def _run(
    x_in: torch.Tensor,
    x_scale: torch.Tensor | None,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    s_gate_up: torch.Tensor | None,
    s_down: torch.Tensor | None,
    weights: torch.Tensor,
    ids: torch.Tensor,
    out_dtype: torch.dtype,
    quantize=quantize_rows,
    slots: bool = False,
) -> torch.Tensor:
    t, h = x_in.shape
    e, two_i, _ = w_gate_up.shape
    i = two_i // 2
    k = ids.shape[1]
    n_pairs = t * k
    fp8 = s_gate_up is not None
    dev = x_in.device
    if n_pairs == 0:
        return torch.zeros((t, h), dtype=out_dtype, device=dev)
    x_in, w_gate_up, w_down = x_in.contiguous(), w_gate_up.contiguous(), w_down.contiguous()
    pairs, block_expert = align(ids, e)
    n_blocks = block_expert.numel()
    act_dtype = torch.float32 if fp8 else x_in.dtype
    act = torch.empty((n_pairs, i), dtype=act_dtype, device=dev)
    dummy = torch.zeros(1, dtype=torch.float32, device=dev)
    _gemm_swiglu_kernel[(n_blocks, cdiv(i, BLOCK_N))](
        x_in, x_scale if fp8 else dummy, w_gate_up, s_gate_up.contiguous() if fp8 else dummy, act, pairs,
        block_expert, n_pairs, k, h, i,
        x_in.stride(0), w_gate_up.stride(0), w_gate_up.stride(1), s_gate_up.stride(0) if fp8 else 0, act.stride(0),
        A_PER_PAIR=False, FP8=fp8, UPCAST=_UPCAST, BM=BLOCK_M, BN=BLOCK_N, BK=BLOCK_K, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )  # fmt: skip
    if fp8:
        act, act_scale = quantize(act)
        act_scale = act_scale.reshape(-1).contiguous()
    else:
        act_scale = dummy
    y = torch.empty((n_pairs, h), dtype=torch.float32, device=dev)
    _gemm_kernel[(n_blocks, cdiv(h, BLOCK_N))](
        act, act_scale, w_down, s_down.contiguous() if fp8 else dummy, y, pairs, block_expert, n_pairs, i, h,
        act.stride(0), w_down.stride(0), w_down.stride(1), s_down.stride(0) if fp8 else 0, y.stride(0),
        FP8=fp8, UPCAST=_UPCAST, BM=BLOCK_M, BN=BLOCK_N, BK=BLOCK_K, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )  # fmt: skip
    if slots:
        return y.view(t, k, h)
    return combine(y.view(t, k, h), weights, out_dtype)


def fused_experts_triton(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    weights: torch.Tensor,
    ids: torch.Tensor,
    *,
    slots: bool = False,
) -> torch.Tensor:
    """bf16/fp16 fused SwiGLU experts; intermediate rounded to x.dtype, fp32 accumulation.

    ``slots=True`` returns the fp32 per-slot outputs [T, k, H] before the combine.
    """
    check_shapes(x, w_gate_up, w_down, weights, ids)
    return _run(x, None, w_gate_up, w_down, None, None, weights, ids, x.dtype, slots=slots)


def fp8_experts_triton(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    w_gate_up_scale: torch.Tensor,
    w_down_scale: torch.Tensor,
    weights: torch.Tensor,
    ids: torch.Tensor,
    *,
    quantize=quantize_rows,
) -> torch.Tensor:
    """FP8 fused experts: per-token activation scales, per-channel weight scales, output x.dtype.

    ``quantize`` picks the activation scales (per row by default; the mutant passes a per-tensor one).
    """
    check_shapes(x, w_gate_up, w_down, weights, ids)
    xq, xs = quantize(x)
    return _run(
        xq, xs.reshape(-1).contiguous(), w_gate_up, w_down, w_gate_up_scale.float(), w_down_scale.float(),
        weights, ids, x.dtype, quantize=quantize,
    )  # fmt: skip
