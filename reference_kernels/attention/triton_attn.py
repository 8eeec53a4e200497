"""Batch-invariant attention in Triton (CUDA; the interpreter runs it on CPU at tiny shapes).

One kernel body serves prefill and decode so that both do the same arithmetic:

- A program owns a *query tile* of ``BLOCK_M`` rows, a row being (token, q head
  of one KV-head group): ``BLOCK_M // G`` tokens of one sequence times its ``G``
  grouped heads. A decode tile holds one token (``G`` live rows). An MMA output
  element depends only on its own row and column, so a row's scores do not
  depend on which other rows share the tile.
- KV is cut into splits of ``SPLIT`` tokens anchored at absolute position 0, and
  each split is walked in ``BLOCK_N`` blocks from its start with a fresh online
  softmax state. Decode walks ``[start, min(end, len))``; a prefill tile walks up
  to its last token's position, and the blocks past a given row's position are
  exact no-ops for that row (p = 0, rescale factor exp2(0) = 1). The prefill walks
  every (split, block) in one loop, folding a split when the next one starts, so
  its loads stay pipelined across split boundaries (one loop per split drained the
  pipeline every ``SPLIT / BLOCK_N`` blocks).
- Whole blocks that every live row of a tile sees skip the key masks. A valid
  score takes the same operations either way (``exp2(fma(s, scale, -max))``, the
  max taken on raw scores and scaled after, which is exact since rounding is
  monotone), so a row's bits do not depend on which variant visited a block.
- Split partials (max in log2 units, sum, unnormalised output) are merged left to
  right by ``_merge`` with explicit FMAs: in registers inside the prefill kernel,
  and by ``_merge_kernel`` for decode, whose splits run as separate programs so
  that a single long sequence still fills the GPU. The split count of a sequence
  comes from its length only, never from the batch or the SM count.
- Tiles, block sizes and warps are fixed constants: no autotuning (a tuned config
  may differ between shapes and so between batch sizes). The split size is a
  runtime argument, so split sizes share compiled kernels (Triton specializes
  an integer argument only on divisibility by 16); the split-KV mutants call these
  kernels with a batch-dependent one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..interpreter_dot import install as _install_interpreter_dot
from ..launch import Launcher, aligned
from .split import SPLIT_SIZE

_install_interpreter_dot()  # CPU tests measure the kernel, not numpy's BLAS (see interpreter_dot)

BLOCK_M = 64
BLOCK_N = 64
NUM_WARPS = 4
NUM_STAGES = 2
LOG2E = 1.4426950408889634
MERGE_STAGES = 8  # partial loads in flight per merge program (no effect on bits)


@dataclass(frozen=True)
class Tiles:
    """Query tile rows, warps and pipeline stages of one launch, and the key block. The first three
    only decide which rows share a program and how loads overlap. ``block_n`` (the online-softmax
    step) fixes a row's arithmetic: prefill and decode must use the same one, and results only ever
    use ``BLOCK_N`` (``bench_attention.py --sweep`` times candidates and checks their bits)."""

    block_m: int = BLOCK_M
    num_warps: int = NUM_WARPS
    num_stages: int = NUM_STAGES
    block_n: int = BLOCK_N
    # Decode only: the last split program of a (sequence, KV head) to finish merges the partials
    # itself (``_merge_if_last``) instead of a second kernel; the same folds in the same order.
    fused_merge: bool = False
    # Contiguous prefill only: K/V blocks through TMA descriptors (Hopper's bulk tensor copy) instead
    # of per-element pointers. The loaded values are the same, so a row's arithmetic is unchanged.
    tma: bool = False


PREFILL_TILES = Tiles()
# Decode keeps the prefill's 64-row tile (one token's G rows live in it), so both lower to the same
# warpgroup MMA. A 16-row tile reached 86% of the H200's copy bandwidth at B=64, KV=4096 at split
# 256 (this tile 64% then, 82% at split 1024), but it lowers to mma.sync, and its bits differed from the prefill's on MHA at 4096 and
# 8192 keys (suites' prefill-decode oracle, H200): the contract wins over the bandwidth.
# Three stages: the same arithmetic as two (bench_attention.py --sweep), loads further ahead.
DECODE_TILES = Tiles(block_m=BLOCK_M, num_warps=NUM_WARPS, num_stages=3)


@triton.jit
def _merge(m, lsum, o, mj, lj, oj):
    """Fold split partial (mj, lj, oj) into (m, lsum, o); m in log2 units, both finite."""
    mn = tl.maximum(m, mj)
    a = tl.exp2(m - mn)
    b = tl.exp2(mj - mn)
    l_new = tl.fma(lsum, a, lj * b)
    o_new = tl.fma(o, a[:, None], oj * b[:, None])
    return mn, l_new, o_new


@triton.jit
def _merge_splits(Mp, Lp, Op, pidx0, n_splits, row_ok, offs_d, d_mask, D, STAGES: tl.constexpr):
    """Fold the decode partials of splits ``0 .. n_splits - 1`` left to right and normalise: the one
    merge of both decode paths (``_merge_kernel``'s rows, ``_merge_if_last``'s tile). ``.cg`` loads
    read L2, where the other programs' partials are (L1 is not coherent across SMs)."""
    om = row_ok[:, None] & d_mask[None, :]
    m = tl.load(Mp + pidx0, mask=row_ok, other=0.0, cache_modifier=".cg")
    lsum = tl.load(Lp + pidx0, mask=row_ok, other=0.0, cache_modifier=".cg")
    o = tl.load(Op + pidx0[:, None] * D + offs_d[None, :], mask=om, other=0.0, cache_modifier=".cg")
    # Software-pipelined: the loads of later splits do not depend on the fold, only the fold on
    # them, so they are issued ahead (same fold, same order: the arithmetic is unchanged).
    for sp in tl.range(1, n_splits, num_stages=STAGES):
        mj = tl.load(Mp + pidx0 + sp, mask=row_ok, other=0.0, cache_modifier=".cg")
        lj = tl.load(Lp + pidx0 + sp, mask=row_ok, other=0.0, cache_modifier=".cg")
        oj = tl.load(Op + (pidx0 + sp)[:, None] * D + offs_d[None, :], mask=om, other=0.0, cache_modifier=".cg")
        m, lsum, o = _merge(m, lsum, o, mj, lj, oj)
    has = lsum > 0
    return tl.where(has[:, None], o / tl.where(has, lsum, 1.0)[:, None], 0.0)


@triton.jit
def _merge_if_last(Out, Mp, Lp, Op, Count, seq, head_kv, n_splits, pidx0, o_ptrs, row_ok, offs_d, d_mask, D,
                   STAGES: tl.constexpr):  # fmt: skip
    """Count this split program in; the last of its (sequence, KV head) to arrive merges every split.

    Which program comes last changes nothing: the merge reads all partials from memory in split
    order. The barrier puts every thread's partial stores before the counter's release (and the
    acquire before the merge's loads); the last program resets its counter to 0, so the buffer is
    ready for the next call with no memset (and a CUDA graph replays none)."""
    tl.debug_barrier()
    cnt = Count + seq * tl.num_programs(1) + head_kv
    ticket = tl.atomic_add(cnt, 1, sem="acq_rel", scope="gpu")
    if ticket == n_splits - 1:
        tl.atomic_xchg(cnt, 0, sem="relaxed", scope="gpu")
        out = _merge_splits(Mp, Lp, Op, pidx0, n_splits, row_ok, offs_d, d_mask, D, STAGES)
        tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok[:, None] & d_mask[None, :])


@triton.jit
def _fold(m, lsum, o, m_i, l_i, acc, prev, limit):
    """Fold the finished split that starts at key ``prev`` into the running total: the first split
    is taken as it is, a later one merged into the rows that see any of its keys."""
    if prev == 0:
        m, lsum, o = m_i, l_i, acc
    else:
        mn, ln, on = _merge(m, lsum, o, m_i, l_i, acc)
        present = limit > prev
        m = tl.where(present, mn, m)
        lsum = tl.where(present, ln, lsum)
        o = tl.where(present[:, None], on, o)
    return m, lsum, o


@triton.jit
def _step(
    q, K, V, BT, seq, kv_start, head_kv, n0, end, limit, qk_scale, m_i, l_i, acc,
    stride_kt, stride_kh, stride_bt, offs_d, d_mask,
    BLOCK_N: tl.constexpr, PAGED: tl.constexpr, PAGE: tl.constexpr, IEEE: tl.constexpr,
    EVEN_D: tl.constexpr, MASKED: tl.constexpr, TMA: tl.constexpr = False,
):  # fmt: skip
    """One online-softmax step over keys ``[n0, n0 + BLOCK_N)``; rows see keys ``< min(limit, end)``.

    ``TMA``: ``K``/``V`` are descriptors of ``[total_k, Hkv * D]``; a block then also holds keys past
    ``end`` (the next split's or sequence's) and, below ``BLOCK_D``, the next head's columns: both
    are zeroed where the pointer loads would have read zeros, so the MMAs see the same values.

    ``MASKED=False`` only for a block that every live row of the tile sees whole: it skips the key
    masks, nothing else. A valid score takes the same operations in both variants (the row max is
    taken on the raw scores and scaled after: rounding is monotone, so that is the max of the
    scaled scores; then ``exp2(fma(s, scale, -max))``), so a row's bits do not depend on which
    variant visited a block, nor on which other rows share its tile.
    """
    kpos = n0 + tl.arange(0, BLOCK_N)
    kmask = kpos < end
    if TMA:
        k = K.load([kv_start + n0, head_kv * stride_kh])
        v = V.load([kv_start + n0, head_kv * stride_kh])
        if MASKED:
            lmask = kmask[:, None] & d_mask[None, :]
            k = tl.where(lmask, k, 0.0)
            v = tl.where(lmask, v, 0.0)
        elif not EVEN_D:
            k = tl.where(d_mask[None, :], k, 0.0)
            v = tl.where(d_mask[None, :], v, 0.0)
    else:
        if PAGED:
            if MASKED:
                blk = tl.load(BT + seq * stride_bt + kpos // PAGE, mask=kmask, other=0)
            else:
                blk = tl.load(BT + seq * stride_bt + kpos // PAGE)
            slot = blk.to(tl.int64) * PAGE + kpos % PAGE
        else:
            slot = (kv_start + kpos).to(tl.int64)
        ptrs = slot[:, None] * stride_kt + head_kv * stride_kh + offs_d[None, :]
        if MASKED:
            lmask = kmask[:, None] & d_mask[None, :]
            k = tl.load(K + ptrs, mask=lmask, other=0.0)
            v = tl.load(V + ptrs, mask=lmask, other=0.0)
        elif EVEN_D:
            k = tl.load(K + ptrs)
            v = tl.load(V + ptrs)
        else:
            k = tl.load(K + ptrs, mask=d_mask[None, :], other=0.0)
            v = tl.load(V + ptrs, mask=d_mask[None, :], other=0.0)
    if IEEE:
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    if MASKED:
        # Keys past the split's end load as zeros and must be masked too (a split that
        # the block does not tile; for tiled splits they lie past every row's limit anyway).
        valid = (kpos[None, :] < limit[:, None]) & kmask[None, :]
        s = tl.where(valid, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(tl.fma(s, qk_scale, -m_use[:, None]))
    l_i = tl.fma(l_i, alpha, tl.sum(p, 1))
    acc = acc * alpha[:, None]
    if IEEE:
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision="ieee")
    else:
        acc = tl.dot(p.to(v.dtype), v, acc)
    return m_new, l_i, acc


@triton.jit
def _split_partial(
    q, K, V, BT, seq, kv_start, head_kv, start, end, safe, limit, qk_scale,
    stride_kt, stride_kh, stride_bt, offs_d, d_mask,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, PAGED: tl.constexpr,
    PAGE: tl.constexpr, IEEE: tl.constexpr, EVEN_D: tl.constexpr,
):  # fmt: skip
    """Online softmax over keys ``[start, end)`` of one split (decode): the whole blocks below
    ``safe`` (every live row's limit) unmasked, the rest masked."""
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    mid = start + tl.maximum(tl.minimum(end, safe) - start, 0) // BLOCK_N * BLOCK_N
    for n0 in range(start, mid, BLOCK_N):
        m_i, l_i, acc = _step(
            q, K, V, BT, seq, kv_start, head_kv, n0, end, limit, qk_scale, m_i, l_i, acc,
            stride_kt, stride_kh, stride_bt, offs_d, d_mask, BLOCK_N, PAGED, PAGE, IEEE, EVEN_D, False,
        )  # fmt: skip
    for n0 in range(mid, end, BLOCK_N):
        m_i, l_i, acc = _step(
            q, K, V, BT, seq, kv_start, head_kv, n0, end, limit, qk_scale, m_i, l_i, acc,
            stride_kt, stride_kh, stride_bt, offs_d, d_mask, BLOCK_N, PAGED, PAGE, IEEE, EVEN_D, True,
        )  # fmt: skip
    return m_i, l_i, acc


@triton.jit
def _flat_step(
    it, bps, q, K, V, BT, seq, kv_start, head_kv, tile_limit, limit, qk_scale, SPLIT,
    m, lsum, o, m_i, l_i, acc, stride_kt, stride_kh, stride_bt, offs_d, d_mask,
    BLOCK_N: tl.constexpr, PAGED: tl.constexpr, PAGE: tl.constexpr, IEEE: tl.constexpr,
    EVEN_D: tl.constexpr, MASKED: tl.constexpr, TMA: tl.constexpr,
):  # fmt: skip
    """Iteration ``it`` of the prefill's one loop over every (split, block): block ``j`` of split
    ``sp``; the first block of a split folds the one before it and starts a fresh state."""
    sp = it // bps
    j = it - sp * bps
    start = sp * SPLIT
    if j == 0 and sp > 0:
        m, lsum, o = _fold(m, lsum, o, m_i, l_i, acc, start - SPLIT, limit)
        m_i = tl.full(m_i.shape, float("-inf"), tl.float32)
        l_i = tl.zeros(l_i.shape, tl.float32)
        acc = tl.zeros(acc.shape, tl.float32)
    end = tl.minimum(start + SPLIT, tile_limit)
    m_i, l_i, acc = _step(
        q, K, V, BT, seq, kv_start, head_kv, start + j * BLOCK_N, end, limit, qk_scale, m_i, l_i, acc,
        stride_kt, stride_kh, stride_bt, offs_d, d_mask, BLOCK_N, PAGED, PAGE, IEEE, EVEN_D, MASKED, TMA,
    )  # fmt: skip
    return m, lsum, o, m_i, l_i, acc


@triton.jit
def _attn_kernel(
    Q,
    K,
    V,
    BT,
    Out,
    Mp,
    Lp,
    Op,
    Count,
    tile_seq,
    tile_tok0,
    q_start,
    len_q,
    kv_start,
    kv_len,
    qk_scale,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_bt,
    stride_ps,
    H_Q,
    D,
    SPLIT,
    G: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    CAUSAL: tl.constexpr,
    PAGED: tl.constexpr,
    PAGE: tl.constexpr,
    DECODE: tl.constexpr,
    IEEE: tl.constexpr,
    EVEN_D: tl.constexpr,
    FUSED_MERGE: tl.constexpr = False,
    MERGE_STAGES: tl.constexpr = 8,
    TMA: tl.constexpr = False,
    MERGE_ROWS: tl.constexpr = 1,
):
    tile = tl.program_id(0)
    head_kv = tl.program_id(1)
    seq = tl.load(tile_seq + tile)
    tok0 = tl.load(tile_tok0 + tile)
    q0 = tl.load(q_start + seq)
    nq = tl.load(len_q + seq)
    kvl = tl.load(kv_len + seq)
    k0 = tl.load(kv_start + seq)
    rows = tl.arange(0, BLOCK_M)
    tok = tok0 + rows // G
    head = head_kv * G + rows % G
    row_ok = tok < nq
    pos = kvl - nq + tok
    if CAUSAL:
        limit = tl.where(row_ok, pos + 1, 0)
    else:
        limit = tl.where(row_ok, kvl, 0)
    limit = tl.maximum(tl.minimum(limit, kvl), 0)  # a query before the keys (len_q > len_k) sees none
    tile_limit = tl.max(limit, 0)
    safe = tl.min(tl.where(row_ok, limit, tile_limit), 0)  # every live row sees the keys below this
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    q_ptrs = Q + (q0 + tok).to(tl.int64)[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None] & d_mask[None, :], other=0.0)
    o_ptrs = Out + (q0 + tok).to(tl.int64)[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :]
    if DECODE:
        sp = tl.program_id(2)
        start = sp * SPLIT
        if start < tile_limit:
            end = tl.minimum(start + SPLIT, tile_limit)
            mj, lj, oj = _split_partial(
                q, K, V, BT, seq, k0, head_kv, start, end, safe, limit, qk_scale,
                stride_kt, stride_kh, stride_bt, offs_d, d_mask,
                BLOCK_M, BLOCK_N, BLOCK_D, PAGED, PAGE, IEEE, EVEN_D,
            )  # fmt: skip
            pidx0 = ((q0 + tok).to(tl.int64) * H_Q + head) * stride_ps
            pidx = pidx0 + sp
            tl.store(Mp + pidx, mj, mask=row_ok)
            tl.store(Lp + pidx, lj, mask=row_ok)
            tl.store(Op + pidx[:, None] * D + offs_d[None, :], oj, mask=row_ok[:, None] & d_mask[None, :])
            if FUSED_MERGE:
                # A decode tile's live rows are its one token's G heads; the fold is per row, so the
                # merge takes a MERGE_ROWS-row tile of them. Its pipelined partial loads then fit in
                # shared memory: on the whole 64 x 128 tile, 8 stages needed 234,752 B (H200: 232,448).
                r = tl.arange(0, MERGE_ROWS)
                m_tok = tok0 + r // G
                m_head = head_kv * G + r % G
                m_ok = m_tok < nq
                m_pidx0 = ((q0 + m_tok).to(tl.int64) * H_Q + m_head) * stride_ps
                m_optrs = (Out + (q0 + m_tok).to(tl.int64)[:, None] * stride_qt + m_head[:, None] * stride_qh
                           + offs_d[None, :])  # fmt: skip
                n_splits = tl.cdiv(tile_limit, SPLIT)
                _merge_if_last(Out, Mp, Lp, Op, Count, seq, head_kv, n_splits, m_pidx0, m_optrs, m_ok, offs_d,
                               d_mask, D, MERGE_STAGES)  # fmt: skip
        if FUSED_MERGE:
            if tile_limit == 0 and sp == 0:  # no key at all: nothing to merge, the output is zero
                tl.store(o_ptrs, tl.zeros([BLOCK_M, BLOCK_D], tl.float32).to(Out.dtype.element_ty),
                         mask=row_ok[:, None] & d_mask[None, :])  # fmt: skip
    else:
        # One loop over every (split, block) up to the tile's last key, so loads stay pipelined
        # across split boundaries; the same blocks, in the same order, as one loop per split.
        bps = tl.cdiv(SPLIT, BLOCK_N)
        n_full = tile_limit // SPLIT
        n_iter = n_full * bps + tl.cdiv(tile_limit - n_full * SPLIT, BLOCK_N)
        # Unmasked iterations first: whole blocks below ``safe`` (iteration i is block i when the
        # block tiles the split; otherwise every block is masked).
        n_safe = tl.where(SPLIT % BLOCK_N == 0, tl.minimum(safe // BLOCK_N, n_iter), 0)
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        lsum = tl.zeros([BLOCK_M], tl.float32)
        o = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        for it in range(0, n_safe):
            m, lsum, o, m_i, l_i, acc = _flat_step(
                it, bps, q, K, V, BT, seq, k0, head_kv, tile_limit, limit, qk_scale, SPLIT,
                m, lsum, o, m_i, l_i, acc, stride_kt, stride_kh, stride_bt, offs_d, d_mask,
                BLOCK_N, PAGED, PAGE, IEEE, EVEN_D, False, TMA,
            )  # fmt: skip
        for it in range(n_safe, n_iter):
            m, lsum, o, m_i, l_i, acc = _flat_step(
                it, bps, q, K, V, BT, seq, k0, head_kv, tile_limit, limit, qk_scale, SPLIT,
                m, lsum, o, m_i, l_i, acc, stride_kt, stride_kh, stride_bt, offs_d, d_mask,
                BLOCK_N, PAGED, PAGE, IEEE, EVEN_D, True, TMA,
            )  # fmt: skip
        last = tl.maximum(n_iter - 1, 0) // bps * SPLIT
        m, lsum, o = _fold(m, lsum, o, m_i, l_i, acc, last, limit)
        has = lsum > 0
        out = tl.where(has[:, None], o / tl.where(has, lsum, 1.0)[:, None], 0.0)
        tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok[:, None] & d_mask[None, :])


@triton.jit
def _merge_kernel(
    Out,
    Mp,
    Lp,
    Op,
    kv_len,
    stride_qt,
    stride_qh,
    stride_ps,
    H_Q,
    D,
    SPLIT,
    BLOCK_D: tl.constexpr,
    MERGE_STAGES: tl.constexpr,
):
    """Merge the decode partials of one (sequence, query head) left to right.

    One row per program: a fold is one row's arithmetic, so how rows are grouped into programs
    changes no bits, and a single long sequence still has ``H_Q`` programs loading ahead."""
    b = tl.program_id(0)
    head = tl.program_id(1) + tl.arange(0, 1)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    kvl = tl.load(kv_len + b)
    n_splits = (kvl + SPLIT - 1) // SPLIT
    base = (b.to(tl.int64) * H_Q + head) * stride_ps
    one = head < H_Q  # the one row, as a mask
    out = _merge_splits(Mp, Lp, Op, base, n_splits, one, offs_d, d_mask, D, MERGE_STAGES)
    o_ptrs = Out + b.to(tl.int64) * stride_qt + head[:, None] * stride_qh + offs_d[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=d_mask[None, :])


def _block_n(split: int, block_n: int = BLOCK_N) -> int:
    """Key block: BLOCK_N, or the largest power of two <= the split when smaller (tiny test splits).

    A split that the block does not tile still works (its last block is masked):
    the split-KV mutants use near-equal splits of any size; the reference's ``SPLIT_SIZE`` is tiled exactly.
    """
    if split < 16:
        raise ValueError(f"split size {split} must be >= 16")
    return min(block_n, 1 << (split.bit_length() - 1))


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _common(q: torch.Tensor, hkv: int, scale: float | None, block_m: int = BLOCK_M) -> tuple[int, int, float, int]:
    _, hq, d = q.shape
    if hq % hkv:
        raise ValueError(f"query heads {hq} must be a multiple of KV heads {hkv}")
    g = hq // hkv
    if block_m % g:
        raise ValueError(f"GQA group {g} must divide BLOCK_M={block_m}")
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    if not sc > 0:  # the row max is taken on unscaled scores: exact only for a positive scale
        raise ValueError(f"softmax scale must be positive, got {sc}")
    return g, d, sc * LOG2E, max(16, _next_pow2(d))


def _tiles(len_q: torch.Tensor, tok_per_tile: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sequence, first token) of every query tile, longest-position tiles first (load balance only)."""
    dev = len_q.device
    n_t = torch.div(len_q + tok_per_tile - 1, tok_per_tile, rounding_mode="floor")
    seq = torch.repeat_interleave(torch.arange(len_q.numel(), device=dev), n_t)
    first = torch.cumsum(n_t, 0) - n_t
    tok0 = (torch.arange(seq.numel(), device=dev) - first[seq]) * tok_per_tile
    order = torch.flip(torch.arange(seq.numel(), device=dev), [0])
    return seq[order].to(torch.int32).contiguous(), tok0[order].to(torch.int32).contiguous()


def _launch_prefill(q, k, v, bt, q_start, len_q, kv_start, kv_len, *, causal, paged, page, scale, split,
                    tiles: Tiles | None = None):  # fmt: skip
    t = tiles or PREFILL_TILES
    g, d, qk_scale, block_d = _common(q, k.shape[-2], scale, t.block_m)
    blk_n = _block_n(split, t.block_n)
    q = q.contiguous()
    out = torch.empty_like(q)
    if q.shape[0] == 0:
        return out
    tile_seq, tile_tok0 = _tiles(len_q.long(), t.block_m // g)
    hkv = k.shape[-2]
    dummy = torch.empty(1, device=q.device, dtype=torch.float32)
    grid = (tile_seq.numel(), hkv)
    tma = t.tma and not paged
    kk, vv = (_kv_descriptor(x, blk_n, block_d) for x in (k, v)) if tma else (k, v)
    _attn_kernel[grid](
        q, kk, vv, bt, out, dummy, dummy, dummy, bt, tile_seq, tile_tok0,
        q_start, len_q, kv_start, kv_len, qk_scale,
        q.stride(0), q.stride(1), k.stride(-3), k.stride(-2), bt.stride(0), 0, q.shape[1], d, split,
        G=g, BLOCK_M=t.block_m, BLOCK_N=blk_n, BLOCK_D=block_d, CAUSAL=causal,
        PAGED=paged, PAGE=page, DECODE=False, IEEE=q.dtype == torch.float32, EVEN_D=block_d == d, TMA=tma,
        num_warps=t.num_warps, num_stages=t.num_stages,
    )  # fmt: skip
    return out


def _kv_descriptor(x: torch.Tensor, block_n: int, block_d: int):
    """TMA descriptor of contiguous K or V ``[T, Hkv, D]`` as ``[T, Hkv * D]``: one load is a
    ``[block_n, block_d]`` block of one head's keys; past the tensor's edge it reads zeros."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    flat = x.view(x.shape[0], x.shape[1] * x.shape[2])
    return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [block_n, block_d])


def _i32(t: torch.Tensor, dev: torch.device) -> torch.Tensor:
    return t.to(device=dev, dtype=torch.int32).contiguous()


def prefill_varlen_triton(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=True, scale=None, split_size=SPLIT_SIZE,
                          tiles: Tiles | None = None):  # fmt: skip
    """Varlen prefill over contiguous K/V (see ``prefill_varlen``); ``tiles``: benchmarks only."""
    dev = q.device
    cu_q, cu_k = cu_seqlens_q.to(dev).long(), cu_seqlens_k.to(dev).long()
    len_q, len_k = cu_q[1:] - cu_q[:-1], cu_k[1:] - cu_k[:-1]
    bt = torch.zeros((1, 1), device=dev, dtype=torch.int32)
    return _launch_prefill(
        q, k.contiguous(), v.contiguous(), bt, _i32(cu_q[:-1], dev), _i32(len_q, dev),
        _i32(cu_k[:-1], dev), _i32(len_k, dev), causal=causal, paged=False, page=1, scale=scale, split=split_size,
        tiles=tiles,
    )  # fmt: skip


def prefill_paged_triton(
    q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *, scale=None, split_size=SPLIT_SIZE
):
    """Causal prefill of each sequence's last tokens over a paged cache (see ``prefill_paged``)."""
    dev = q.device
    cu_q = cu_seqlens_q.to(dev).long()
    len_q = cu_q[1:] - cu_q[:-1]
    zeros = torch.zeros_like(len_q)
    return _launch_prefill(
        q, k_cache, v_cache, _i32(block_table, dev), _i32(cu_q[:-1], dev), _i32(len_q, dev),
        _i32(zeros, dev), _i32(seq_lens, dev), causal=True, paged=True, page=k_cache.shape[1],
        scale=scale, split=split_size,
    )  # fmt: skip


_index_cache: dict = {}


def _decode_index(b: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ones, arange, zeros) int32 of length b: one query per sequence, at its own row.

    Cached per (b, device) outside CUDA-graph capture; inside a capture they are made fresh (a
    tensor filled by a captured kernel holds nothing until the graph replays)."""
    key = (b, dev)
    got = _index_cache.get(key)
    if got is None:
        got = (torch.ones(b, device=dev, dtype=torch.int32), torch.arange(b, device=dev, dtype=torch.int32),
               torch.zeros(b, device=dev, dtype=torch.int32))  # fmt: skip
        if not (dev.type == "cuda" and torch.cuda.is_current_stream_capturing()):
            _index_cache[key] = got
    return got


_counters: dict[torch.device, torch.Tensor] = {}
_kept_counters: list[torch.Tensor] = []
COUNTER_CHUNK = 1 << 16  # arrival counters per buffer at least: (sequence, KV head) pairs


def _merge_counters(n: int, dev: torch.device) -> torch.Tensor:
    """Zeroed int32 arrival counters for the fused merge, one per (sequence, KV head).

    Every call leaves them zero (the last program of each pair resets its own), so one buffer per
    device serves every call in stream order; calls on two streams at once must not share it. A
    buffer is never freed while cached (a captured graph may hold it); inside a capture with none
    large enough, a fresh one is made and not kept (see ``_decode_index``)."""
    got = _counters.get(dev)
    if got is not None and got.numel() >= n:
        return got
    fresh = torch.zeros(max(n, COUNTER_CHUNK), device=dev, dtype=torch.int32)
    if not (dev.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        _kept_counters.append(fresh)
        _counters[dev] = fresh
    return fresh


_launchers: dict = {}


def _launch(kernel, key, grid, args, consts, options) -> None:
    got = _launchers.get(kernel)
    if got is None:
        got = _launchers[kernel] = Launcher(kernel)
    got.launch(key, grid, args, consts, options)


def decode_paged_triton(q, k_cache, v_cache, block_table, seq_lens, *, scale=None, split_size=SPLIT_SIZE,
                        tiles: Tiles | None = None):  # fmt: skip
    """Split-KV decode: one program per (sequence, KV head, split), then a fixed-order merge (a second
    kernel, or with ``tiles.fused_merge`` the last split program of each (sequence, KV head)).
    ``tiles``: benchmarks only (``bench_attention.py --sweep``), never for results."""
    t = tiles or DECODE_TILES
    if t.block_m % max(1, q.shape[1] // k_cache.shape[2]):  # a tile holds whole tokens' G rows
        t = Tiles()
    g, d, qk_scale, block_d = _common(q, k_cache.shape[2], scale, t.block_m)
    blk_n = _block_n(split_size, t.block_n)
    dev = q.device
    q = q.contiguous()
    b, hq, _ = q.shape
    out = torch.empty_like(q)
    if b == 0:
        return out
    hkv = k_cache.shape[2]
    page = k_cache.shape[1]
    if v_cache.shape != k_cache.shape or v_cache.stride() != k_cache.stride() or v_cache.dtype != k_cache.dtype:
        raise ValueError("v_cache must have k_cache's shape, strides and dtype (the kernel indexes both alike)")
    bt = _i32(block_table, dev)
    # Grid sized from the block table's capacity (no host sync); programs past a
    # sequence's length return at once. A sequence's split count is its own.
    max_splits = max(1, -(-bt.shape[1] * page // split_size))
    mp = torch.empty((b, hq, max_splits), device=dev, dtype=torch.float32)
    lp = torch.empty_like(mp)
    op = torch.empty((b, hq, max_splits, d), device=dev, dtype=torch.float32)
    ones, ar, zeros = _decode_index(b, dev)
    lens = _i32(seq_lens, dev)
    count = _merge_counters(b * hkv, dev) if t.fused_merge else bt
    key = None
    if q.is_cuda:
        key = (q.shape, q.dtype, k_cache.shape, k_cache.stride(), k_cache.dtype, bt.shape, bt.stride(), split_size,
               dev.index, t, *aligned(q, k_cache, v_cache, bt, lens, count))  # fmt: skip
    opts = {"num_warps": t.num_warps, "num_stages": t.num_stages}
    _launch(_attn_kernel, key, (b, hkv, max_splits), (
        q, k_cache, v_cache, bt, out, mp, lp, op, count, ar, zeros, ar, ones, zeros, lens, qk_scale,
        q.stride(0), q.stride(1), k_cache.stride(1), k_cache.stride(2), bt.stride(0), max_splits, hq, d, split_size),
        {"G": g, "BLOCK_M": t.block_m, "BLOCK_N": blk_n, "BLOCK_D": block_d, "CAUSAL": True,
         "PAGED": True, "PAGE": page, "DECODE": True, "IEEE": q.dtype == torch.float32,
         "EVEN_D": block_d == d, "FUSED_MERGE": t.fused_merge, "MERGE_STAGES": MERGE_STAGES,
         "MERGE_ROWS": _next_pow2(g)}, opts)  # fmt: skip
    if not t.fused_merge:
        _launch(_merge_kernel, key, (b, hq), (
            out, mp, lp, op, lens, q.stride(0), q.stride(1), max_splits, hq, d, split_size),
            {"BLOCK_D": block_d, "MERGE_STAGES": MERGE_STAGES}, {"num_warps": 1})  # fmt: skip
    return out
