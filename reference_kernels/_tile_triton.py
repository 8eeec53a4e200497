"""Triton helpers that place a GEMM output tile: which tile a program owns, and its offsets and masks.

Shared by the GEMM kernels so that one source says where a tile sits; none of it touches a value,
only which program computes which elements (the kernels' sums are their own).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def grouped_tile(tile, num_pid_m, num_in_group, GROUP_M: tl.constexpr):
    """``(pid_m, pid_n)`` of output tile number ``tile`` in grouped launch order (``GROUP_M`` row
    tiles walked together, ``num_in_group = GROUP_M * num_pid_n`` tiles a group, for L2 reuse):
    it changes who runs when, never an element's sum."""
    group = tile // num_in_group
    first_m = group * GROUP_M
    group_size = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((tile % num_in_group) % group_size)
    pid_n = (tile % num_in_group) // group_size
    return pid_m, pid_n


@triton.jit
def tile_offsets(pid_m, pid_n, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """``(offs_m, offs_n, offs_k, mask_m, mask_n)`` of tile (``pid_m``, ``pid_n``): its rows, columns
    and one K step, and which rows and columns lie inside ``M`` x ``N``."""
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    return offs_m, offs_n, offs_k, mask_m, mask_n
