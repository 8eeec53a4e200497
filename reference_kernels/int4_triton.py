"""Reference int4 weight-only GEMM in Triton, with a K split whose order never depends on M.

Each output element is summed in one fixed order, set by K alone: K is cut into ``splits(K)``
pieces of ``GROUPS_PER_SPLIT`` 128-channel groups; each piece is summed in its own fp32
accumulator (``tl.dot`` group by group, upward) and the pieces are added in piece order onto
``-0.0`` (the one value whose sum with x is x, signed zeros included). What M changes is only
where that happens:

- few output tiles (decode-sized M): one program per (tile, piece) writes its fp32 piece, and a
  second kernel adds the pieces in piece order. The weight read is spread over every SM, as a
  Marlin-style split-K does, but the pieces never move with the batch size;
- many tiles: one program per tile walks every piece itself, the same adds in the same order;
- many rows (``PREDEQUANT_ROWS``): the weight is dequantized once to bf16 (``(q - z) * s`` in
  fp32, rounded once: the fused path's expression) and the same kernel loads it instead of
  unpacking it in every row tile.

The tile (and so the MMA instruction) is one configuration for every M. The split by batch size
that Marlin-style kernels do, with slices that move with M, is ``mutants/int4_splitk``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._tile_triton import tile_offsets
from .device import cdiv, sm_count
from .interpreter_dot import install as _install_interpreter_dot
from .keyed_launch import launch

_install_interpreter_dot()

GPU_TILE = (64, 64, 128, 4, 4)  # BLOCK_M, BLOCK_N, BLOCK_K (= the group), warps, stages
INTERPRET_TILE = (16, 32, 128, 1, 1)
GROUPS_PER_SPLIT = 8  # 1,024 input channels a piece: K = 4096 is 4 pieces, whatever M is
PREDEQUANT_ROWS = 512  # from here on the weight is dequantized once per call, not once per row tile


def splits(k: int, group: int = 128) -> int:
    """Pieces K is summed in (a function of K only)."""
    return cdiv(k // group, GROUPS_PER_SPLIT)


@triton.jit
def _dequant_tile(QW, S, QZ, W, g, k, kmask, offs_n, mask_n, stride_qw, stride_s, stride_qz, stride_w,
                  PREDEQUANT: tl.constexpr):  # fmt: skip
    # g is clamped by the caller and kmask marks the live channels: a group past K reads as zeros
    mask = kmask[:, None] & mask_n[None, :]
    if PREDEQUANT:
        w = tl.load(W + k[:, None] * stride_w + offs_n[None, :], mask=mask, other=0.0)
    else:
        packed = tl.load(QW + (k[:, None] // 8) * stride_qw + offs_n[None, :], mask=mask, other=0)
        q = (packed >> ((k[:, None] % 8) * 4)) & 0xF
        zp = tl.load(QZ + g * stride_qz + offs_n // 8, mask=mask_n, other=0)
        z = (zp >> ((offs_n % 8) * 4)) & 0xF
        s = tl.load(S + g * stride_s + offs_n, mask=mask_n, other=0.0).to(tl.float32)
        w = tl.where(mask, ((q - z[None, :]).to(tl.float32) * s[None, :]), 0.0).to(W.dtype.element_ty)
    return w


@triton.jit
def _int4_kernel(A, QW, S, QZ, W, C, M, N, G, stride_am, stride_qw, stride_s, stride_qz, stride_w, stride_cs,
                 stride_cm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 GROUPS: tl.constexpr, PIECES: tl.constexpr, PREDEQUANT: tl.constexpr):  # fmt: skip
    # PIECES: pieces this program sums (all of them, or one when the launch splits K)
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_s = tl.program_id(2)
    offs_m, offs_n, offs_k, mask_m, mask_n = tile_offsets(pid_m, pid_n, M, N, BLOCK_M, BLOCK_N, BLOCK_K)
    total = tl.full((BLOCK_M, BLOCK_N), -0.0, dtype=tl.float32)
    for j in range(0, PIECES):
        piece = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for i in range(0, GROUPS):
            g = (pid_s * PIECES + j) * GROUPS + i
            k = g * BLOCK_K + offs_k
            kmask = k < G * BLOCK_K
            a = tl.load(A + offs_m[:, None] * stride_am + k[None, :], mask=mask_m[:, None] & kmask[None, :], other=0.0)
            w = _dequant_tile(QW, S, QZ, W, tl.minimum(g, G - 1), k, kmask, offs_n, mask_n, stride_qw, stride_s,
                              stride_qz, stride_w, PREDEQUANT)  # fmt: skip
            piece = tl.dot(a, w, piece)
        total = total + piece
    tl.store(C + pid_s * stride_cs + offs_m[:, None] * stride_cm + offs_n[None, :], total.to(C.dtype.element_ty),
             mask=mask_m[:, None] & mask_n[None, :])  # fmt: skip


@triton.jit
def _add_pieces_kernel(P, C, MN, stride_p, PIECES: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    total = tl.full((BLOCK,), -0.0, dtype=tl.float32)
    for s in range(0, PIECES):
        total = total + tl.load(P + s * stride_p + offs, mask=mask, other=0.0)
    tl.store(C + offs, total.to(C.dtype.element_ty), mask=mask)


@triton.jit
def _dequant_kernel(QW, S, QZ, W, N, stride_qw, stride_s, stride_qz, stride_w, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr):  # fmt: skip
    g = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    k = g * BLOCK_K + tl.arange(0, BLOCK_K)
    mask_n = offs_n < N
    kmask = k >= 0
    w = _dequant_tile(QW, S, QZ, W, g, k, kmask, offs_n, mask_n, stride_qw, stride_s, stride_qz, stride_w, False)
    tl.store(W + k[:, None] * stride_w + offs_n[None, :], w, mask=kmask[:, None] & mask_n[None, :])


def plan(m: int, n: int, k: int, device: torch.device, tile: tuple[int, ...]) -> tuple[bool, bool]:
    """``(split the launch by pieces, dequantize the weight first)``: where the work goes, never the order."""
    bm, bn = tile[0], tile[1]
    tiles = cdiv(m, bm) * cdiv(n, bn)
    many = sm_count(device) if device.type == "cuda" else 4
    return tiles < many, m >= PREDEQUANT_ROWS


def int4_mm_triton(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor,
                   tile: tuple[int, int, int, int, int] | None = None,
                   force: tuple[bool, bool] | None = None) -> torch.Tensor:  # fmt: skip
    """``x[M, K] @ dequant(qweight)`` in x's dtype (fp32 accumulation, pieces in K order).

    ``tile`` overrides the one configuration and ``force`` the plan (split, predequantize): both are
    for benchmarks/sweep_int4_tiles.py and the tests that prove every plan gives the same bits."""
    m, k = x.shape
    n = qweight.shape[1]
    if k % 128 or k // scales.shape[0] != 128:
        raise ValueError(f"int4-gemm reference kernel: group 128 only, got K={k} with {scales.shape[0]} groups")
    interpret = not x.is_cuda
    bm, bn, bk, warps, stages = tile or (INTERPRET_TILE if interpret else GPU_TILE)
    out_dtype = torch.float32 if interpret else x.dtype
    c = torch.empty((m, n), dtype=out_dtype, device=x.device)
    if not (m and n):
        return c.to(x.dtype)
    x, qweight, scales, qzeros = x.contiguous(), qweight.contiguous(), scales.contiguous(), qzeros.contiguous()
    pieces, groups = splits(k), k // 128
    split, predequant = force or plan(m, n, k, x.device, (bm, bn))
    w = torch.empty((k, n) if predequant else (1, 1), dtype=x.dtype, device=x.device)
    if predequant:
        launch(_dequant_kernel, (groups, cdiv(n, bn)),
               (qweight, scales, qzeros, w, n, qweight.stride(0), scales.stride(0), qzeros.stride(0), w.stride(0)),
               {"BLOCK_N": bn, "BLOCK_K": bk}, warps)  # fmt: skip
    dest = torch.empty((pieces, m, n), dtype=torch.float32, device=x.device) if split else c[None]
    launch(_int4_kernel, (cdiv(m, bm), cdiv(n, bn), pieces if split else 1),
           (x, qweight, scales, qzeros, w, dest, m, n, groups, x.stride(0), qweight.stride(0), scales.stride(0),
            qzeros.stride(0), w.stride(0), dest.stride(0), dest.stride(1)),
           {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUPS": GROUPS_PER_SPLIT, "PIECES": 1 if split else pieces,
            "PREDEQUANT": predequant}, warps, stages)  # fmt: skip
    if split:
        launch(_add_pieces_kernel, (cdiv(m * n, 1024),), (dest, c, m * n, dest.stride(0)),
               {"PIECES": pieces, "BLOCK": 1024}, 4)  # fmt: skip
    return c.to(x.dtype)
