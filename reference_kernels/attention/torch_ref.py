"""Batch-invariant attention in plain torch (the CPU path of the reference kernels).

Every query row (one token of one sequence, all its heads) is computed by the
same sequence of element-wise IEEE operations, whatever else is in the batch:

- KV is cut into splits of ``split_size`` tokens anchored at absolute position
  0 of the sequence (``[0, S)``, ``[S, 2S)``...), so the split structure of a
  row depends only on how many keys it sees, never on the batch, the chunk it
  came in, or whether it is a prefill or a decode row.
- Inside a split: scores are q.k summed over D by a fixed pairwise tree of
  element-wise adds (no BLAS: its reduction order and code path can depend on
  M, on alignment and on threads); invalid keys (beyond the row's position,
  padding) get -inf, their probability an exact 0; the split max is exact; the
  exponential is ``det_exp`` (ATen's SIMD exp and its scalar tail disagree in
  the last bit, and which elements land in the tail depends on the tensor
  size); the row sum and P@V are pairwise trees over the split's ``S`` slots.
- Splits are merged left to right with the online-softmax rescale (split 0
  initialises the state; split j>0: m'=max(m, m_j), a=exp(m-m'), b=exp(m_j-m'),
  l=l*a+l_j*b, o=o*a+o_j*b); the output is o/l cast to q's dtype.

Consequences (what holds): batch size, batch position, run-to-run; decode at
position t == prefill at position t bitwise (the row sees the same valid keys
at the same slots); chunked prefill == whole prefill bitwise for *any* chunk
boundary, because splits are anchored to absolute positions, not to chunk
starts. What does not hold: a different ``split_size`` gives different bits,
and this path is not bit-identical to the Triton path (different exp and
different summation trees): pick one path per run.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..moe.detmath import det_exp
from ..moe.tree import tree_sum
from .split import SPLIT_SIZE

SlotFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# Elements of the largest temporary (rows x heads x split x D) per chunk of rows.
_CHUNK_ELEMENTS = 1 << 20
_MIN_ROWS = 4


def _pow2_at_least(n: int) -> int:
    w = 1
    while w < n:
        w *= 2
    return w


def _check_heads(q: torch.Tensor, hkv: int) -> int:
    hq = q.shape[1]
    if hq % hkv:
        raise ValueError(f"query heads {hq} must be a multiple of KV heads {hkv}")
    return hq // hkv


def _split_partial(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(m, l, o) of one split for C rows.

    q ``[C, Hkv, G, D]`` fp32; k, v ``[C, S, Hkv, D]`` fp32 (zeros where invalid);
    valid ``[C, S]``. Returns m, l ``[C, Hkv, G]`` and unnormalised o ``[C, Hkv, G, D]``.
    """
    kt = k.permute(0, 2, 1, 3)  # [C, Hkv, S, D]
    s = tree_sum(q[:, :, :, None, :] * kt[:, :, None, :, :]) * scale  # [C, Hkv, G, S]
    mask = valid[:, None, None, :]
    s = torch.where(mask, s, float("-inf"))
    m = s.amax(dim=-1)
    p = torch.where(mask, det_exp(s - m[..., None]), 0.0)
    l_ = tree_sum(p)
    vt = v.permute(0, 2, 3, 1)  # [C, Hkv, D, S]
    # "+ 0.0" turns a -0 sum into +0: masked slots contribute 0*v (either sign of zero),
    # so only an all-zero sum could tell a trimmed or masked slot from a missing one.
    o = tree_sum(p[:, :, :, None, :] * vt[:, :, None, :, :]) + 0.0  # [C, Hkv, G, D]
    return m, l_, o


def attend_rows(
    q: torch.Tensor,
    flat_k: torch.Tensor,
    flat_v: torch.Tensor,
    row_seq: torch.Tensor,
    row_limit: torch.Tensor,
    slot_fn: SlotFn,
    *,
    scale: float | None,
    split_size: int,
) -> torch.Tensor:
    """Attention of query rows ``q[R, Hq, D]`` over keys ``[0, row_limit[r])`` of sequence ``row_seq[r]``.

    ``slot_fn(seq[C, 1], pos[C, S])`` maps positions to rows of ``flat_k``/``flat_v``
    (``[T, Hkv, D]``). ``row_limit`` already folds causality in (query position + 1).
    """
    if q.dim() != 3 or flat_k.dim() != 3:
        raise ValueError(
            f"expected q [R, Hq, D] and K [T, Hkv, D], got {tuple(q.shape)}, {tuple(flat_k.shape)}"
        )
    r_total, hq, d = q.shape
    hkv = flat_k.shape[1]
    g = _check_heads(q, hkv)
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    dev = q.device
    s_ = int(split_size)
    limit = row_limit.to(device=dev, dtype=torch.long)
    seq = row_seq.to(device=dev, dtype=torch.long)
    n_splits = torch.div(limit + s_ - 1, s_, rounding_mode="floor")
    m = torch.full((r_total, hkv, g), float("-inf"), device=dev)
    l_ = torch.zeros((r_total, hkv, g), device=dev)
    o = torch.zeros((r_total, hkv, g, d), device=dev)
    qf = q.float().view(r_total, hkv, g, d)
    for j in range(int(n_splits.max()) if r_total else 0):
        active = torch.nonzero(n_splits > j).flatten()
        # Rows sorted by how many keys of this split they see, so a chunk can be trimmed.
        seen = torch.clamp(limit[active] - j * s_, max=s_)
        active = active[torch.argsort(seen, stable=True)]
        seen = torch.clamp(limit[active] - j * s_, max=s_)
        c0 = 0
        while c0 < active.numel():
            # Width: the next power of two >= the most keys any row of the chunk sees. The
            # pairwise tree over S slots whose upper slots are all zero reduces exactly to
            # the tree over this width, so trimming changes no bit.
            n_left = active.numel() - c0
            chunk = n_left
            w = _pow2_at_least(int(seen[c0 + chunk - 1]))
            while chunk > _MIN_ROWS and chunk * w * hq * d > _CHUNK_ELEMENTS:
                chunk = max(_MIN_ROWS, chunk // 2)
                w = _pow2_at_least(int(seen[c0 + chunk - 1]))
            rows = active[c0 : c0 + chunk]
            c0 += chunk
            pos = j * s_ + torch.arange(w, device=dev)[None, :]  # [1, w]
            lim = limit[rows, None]
            valid = pos < lim  # [C, w]
            safe = torch.minimum(pos, lim - 1)
            idx = slot_fn(seq[rows, None], safe)
            vmask = valid[:, :, None, None]
            k = torch.where(vmask, flat_k[idx].float(), 0.0)
            v = torch.where(vmask, flat_v[idx].float(), 0.0)
            mj, lj, oj = _split_partial(qf[rows], k, v, valid, sc)
            if j == 0:
                m[rows], l_[rows], o[rows] = mj, lj, oj
                continue
            m0, l0, o0 = m[rows], l_[rows], o[rows]
            mn = torch.maximum(m0, mj)
            a = det_exp(m0 - mn)
            b = det_exp(mj - mn)
            m[rows] = mn
            l_[rows] = l0 * a + lj * b
            o[rows] = o0 * a[..., None] + oj * b[..., None]
    has = l_ > 0
    out = torch.where(has[..., None], o / torch.where(has, l_, 1.0)[..., None], 0.0)
    return out.view(r_total, hq, d).to(q.dtype)


def _lengths(cu: torch.Tensor) -> torch.Tensor:
    cu = cu.long()
    return cu[1:] - cu[:-1]


def _query_rows(
    n_rows: int, cu_q: torch.Tensor, len_q: torch.Tensor, seq_len: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(row_seq, row_pos)`` of each query row: its sequence, and its position there, the queries
    of a sequence being the last ``len_q`` of its ``seq_len`` positions (prefill, chunked or not)."""
    dev = cu_q.device
    row_seq = torch.repeat_interleave(torch.arange(len_q.numel(), device=dev), len_q)
    row_in = torch.arange(n_rows, device=dev) - cu_q[row_seq]
    return row_seq, (seq_len - len_q)[row_seq] + row_in


def prefill_varlen_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    *,
    causal: bool = True,
    scale: float | None = None,
    split_size: int = SPLIT_SIZE,
) -> torch.Tensor:
    """Varlen prefill; the queries of a sequence are its last ``len_q`` positions."""
    dev = q.device
    cu_q, cu_k = cu_seqlens_q.to(dev).long(), cu_seqlens_k.to(dev).long()
    len_q, len_k = _lengths(cu_q), _lengths(cu_k)
    if bool((len_q > len_k).any()):
        raise ValueError("each sequence needs len_k >= len_q (queries are the last len_q positions)")
    row_seq, row_pos = _query_rows(q.shape[0], cu_q, len_q, len_k)
    limit = row_pos + 1 if causal else len_k[row_seq]

    def slot_fn(seq: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return cu_k[seq] + pos

    return attend_rows(q, k, v, row_seq, limit, slot_fn, scale=scale, split_size=split_size)


def prefill_paged_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    scale: float | None = None,
    split_size: int = SPLIT_SIZE,
) -> torch.Tensor:
    """Causal attention of the last ``len_q`` tokens of each sequence over its paged cache.

    The cache must already hold every position ``< seq_lens[b]`` (write first).
    Decode is the case ``len_q == 1``.
    """
    dev = q.device
    cu_q = cu_seqlens_q.to(dev).long()
    len_q = _lengths(cu_q)
    lens = seq_lens.to(dev).long()
    row_seq, row_pos = _query_rows(q.shape[0], cu_q, len_q, lens)
    bs = k_cache.shape[1]
    bt = block_table.to(dev).long()

    def slot_fn(seq: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return bt[seq, torch.div(pos, bs, rounding_mode="floor")] * bs + pos % bs

    flat_k = k_cache.view(-1, *k_cache.shape[2:])
    flat_v = v_cache.view(-1, *v_cache.shape[2:])
    return attend_rows(q, flat_k, flat_v, row_seq, row_pos + 1, slot_fn, scale=scale, split_size=split_size)


def decode_paged_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    scale: float | None = None,
    split_size: int = SPLIT_SIZE,
) -> torch.Tensor:
    """One query per sequence at position ``seq_lens[b] - 1`` over its paged cache."""
    b = q.shape[0]
    cu_q = torch.arange(b + 1, device=q.device)
    return prefill_paged_torch(
        q, k_cache, v_cache, block_table, cu_q, seq_lens, scale=scale, split_size=split_size
    )
