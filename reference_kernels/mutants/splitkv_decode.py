"""Mutant: split-KV decode whose number of splits comes from batch size and SM count.

FlashDecoding-style schedulers split each sequence's KV so that
``batch x kv_heads x splits`` fills the GPU: few sequences -> many splits, a full
batch -> one. The split *count* (hence the split boundaries and the merge) then
depends on what else is in the batch, and a sequence's output bits change with the
batch size. This is the positive control of the ``attention-decode`` suites and must
come out ``divergent``.

On CPU: plain torch, partials per split in fp32 (softmax over the split, log-sum-exp
merge), as the real kernels do. On CUDA: the reference Triton kernel itself, with
its split *size* derived from the heuristic's count for the longest sequence in the
batch: near-equal parts, ``ceil(L / n)`` keys each (the split size is a runtime
argument of the kernel, so compiled variants are shared). The only difference from the reference
is then where the splits fall, which isolates the cause, at kernel speed. The split
size must follow the length exactly: rounded to a power of two or a block multiple, a
single sequence would keep 64-key splits anchored at 0 at every chunk length, and
chunked prefill would not move a boundary (measured on the H200: that variant was
vacuous as the chunking control).
"""

from __future__ import annotations

import math

import torch

from ..attention import _use_triton  # the family's own reading of device.resolve
from ..attention.stock import gather_paged

DEFAULT_SMS = 132  # H100/H200 SXM
_NEG = -1e30  # finite mask value: exp(_NEG - m) is exactly 0 and never produces NaN


def num_splits(
    batch: int,
    kv_heads: int,
    kv_len: int,
    sm_count: int = DEFAULT_SMS,
    max_splits: int = 64,
    min_keys: int = 64,
) -> int:
    """Occupancy heuristic: enough splits for ~one wave of programs, at least ``min_keys`` keys each."""
    programs = max(1, batch * kv_heads)
    want = max(1, -(-sm_count // programs))
    return max(1, min(want, max_splits, -(-kv_len // min_keys)))


def _sms(q: torch.Tensor, sm_count: int | None) -> int:
    if sm_count is not None:
        return sm_count
    return torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else DEFAULT_SMS


def heuristic_split_size(n_splits: int, max_len: int, floor: int = 16) -> int:
    """Keys per split when ``max_len`` keys are cut into ``n_splits`` near-equal parts (at least ``floor``)."""
    return max(floor, -(-max_len // max(1, n_splits)))


def splitkv_attend(q, k, v, n: int, *, causal: bool, scale: float) -> torch.Tensor:
    """q [Lq, Hq, D] (the last Lq positions) over k/v [Lk, Hkv, D] cut into ``n`` near-equal parts."""
    lq, hq, d = q.shape
    lk, hkv, _ = k.shape
    g = hq // hkv
    qf = q.float().view(lq, hkv, g, d)
    kf, vf = k.float(), v.float()
    qpos = torch.arange(lk - lq, lk, device=q.device)
    bounds = [round(j * lk / n) for j in range(n + 1)]
    ms, ls, os_ = [], [], []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        s = torch.einsum("qhgd,khd->qhgk", qf, kf[lo:hi]) * scale
        if causal:
            keep = torch.arange(lo, hi, device=q.device)[None, :] <= qpos[:, None]
            s = s.masked_fill(~keep[:, None, None, :], float("-inf"))
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m)
        ms.append(m)
        ls.append(p.sum(-1, keepdim=True))
        os_.append(torch.einsum("qhgk,khd->qhgd", p, vf[lo:hi]))
    mx = torch.stack(ms).amax(0)
    num = sum(o * torch.exp(m - mx) for o, m in zip(os_, ms, strict=True))
    den = sum(lsum * torch.exp(m - mx) for lsum, m in zip(ls, ms, strict=True))
    return (num / den).reshape(lq, hq, d).to(q.dtype)


def splitkv_decode(
    q,
    k_cache,
    v_cache,
    block_table,
    seq_lens,
    *,
    scale=None,
    sm_count: int | None = None,
    min_keys: int = 64,
    backend: str = "auto",
    splits: int | None = None,
    max_len: int | None = None,
    split_size: int | None = None,
    max_splits: int = 64,
):
    """``attention-decode`` signature; KV cut into ``num_splits(B, Hkv, L)`` near-equal parts.

    ``backend``: ``auto`` (Triton on CUDA, torch otherwise), ``torch`` or ``triton``
    (on CPU tensors under ``TRITON_INTERPRET=1``). On the Triton path a caller may fix the
    count (``splits``), bound the lengths without reading them on the device (``max_len``: a
    CUDA graph cannot, an engine knows them on the host) or give the split size itself
    (``split_size``, a fixed-size policy).
    """
    sms = _sms(q, sm_count)
    b, _, d = q.shape
    hkv = k_cache.shape[2]
    if b == 0:
        return torch.empty_like(q)
    if _use_triton(q, backend):
        from ..attention.triton_attn import decode_paged_triton

        if split_size is None:
            lmax = max_len if max_len is not None else int(seq_lens.max())
            n = splits if splits is not None else num_splits(b, hkv, lmax, sms, max_splits, min_keys)
            split_size = heuristic_split_size(n, lmax)
        return decode_paged_triton(q, k_cache, v_cache, block_table, seq_lens, scale=scale, split_size=split_size)
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    out = torch.empty_like(q)
    for i in range(b):
        length = int(seq_lens[i])
        k = gather_paged(k_cache, block_table[i : i + 1], length)[0].transpose(0, 1)  # [L, Hkv, D]
        v = gather_paged(v_cache, block_table[i : i + 1], length)[0].transpose(0, 1)
        n = num_splits(b, hkv, length, sms, min_keys=min_keys)
        out[i] = splitkv_attend(q[i : i + 1], k, v, n, causal=False, scale=sc)[0]
    return out


def splitkv_decode_batched(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    scale: float | None = None,
    sm_count: int | None = None,
    min_keys: int = 16,
    max_splits: int = 16,
    splits: int | None = None,
    partial_dtype: torch.dtype | None = None,
    max_len: int | None = None,
    split_size: int | None = None,
) -> torch.Tensor:
    """``attention-decode`` signature, the whole batch in one pass over the padded block table.

    What a serving engine's decode does: the split count comes from ``num_splits`` for the
    batch and its longest context (``splits`` overrides it, e.g. a fixed split size; ``max_len``
    gives the longest context from the host, sparing a device read), every
    sequence is cut at the same boundaries, and each split's normalized output is stored in
    ``partial_dtype`` (default: q's dtype, as paged-attention v2 keeps its ``tmp_out``) with its max
    and exp-sum in fp32 for the merge. The bundled engine's default mode decodes with it
    (``split_kv="auto"``). ``split_size`` (``split_kv="fixed"``) cuts at multiples of that many
    keys instead, whatever the table's padded width: splits past a sequence's end weigh nothing."""
    b, h, d = q.shape
    if b == 0:
        return torch.empty_like(q)
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    k = k_cache[block_table.long()].reshape(b, -1, *k_cache.shape[2:])  # [B, S, kvH, d]
    v = v_cache[block_table.long()].reshape(b, -1, *v_cache.shape[2:])
    s_len, kvh = k.shape[1], k.shape[2]
    if splits is None:
        lmax = max_len if max_len is not None else int(seq_lens.max())
        splits = num_splits(b, kvh, lmax, _sms(q, sm_count), max_splits=max_splits, min_keys=min_keys)
    g = h // kvh
    scores = torch.einsum("bhgd,bshd->bhgs", q.float().view(b, kvh, g, d), k.float()) * sc
    valid = torch.arange(s_len, device=q.device)[None, :] < seq_lens.to(q.device)[:, None]
    scores = scores.masked_fill(~valid[:, None, None, :], _NEG)
    if splits <= 1 and split_size is None:  # one softmax over the whole context, one rounding
        p = torch.softmax(scores, dim=-1)
        return torch.einsum("bhgs,bshd->bhgd", p, v.float()).reshape(b, h, d).to(q.dtype)
    store = partial_dtype or q.dtype
    step = split_size if split_size is not None else math.ceil(s_len / splits)
    outs, maxes, sums = [], [], []
    for s0 in range(0, s_len, step):
        sc_part = scores[..., s0 : s0 + step]
        mx = sc_part.amax(-1, keepdim=True)
        p = torch.exp(sc_part - mx)
        sm = p.sum(-1, keepdim=True)
        o = torch.einsum("bhgs,bshd->bhgd", p, v[:, s0 : s0 + step].float()) / sm.clamp_min(1e-30)
        outs.append(o.to(store).float())
        sums.append(sm)
        maxes.append(mx)
    m_all = torch.stack(maxes).amax(0)
    w = [sm * torch.exp(mx - m_all) for sm, mx in zip(sums, maxes, strict=True)]
    num = sum(o * wi for o, wi in zip(outs, w, strict=True))
    return (num / sum(w)).reshape(b, h, d).to(q.dtype)


def splitkv_prefill(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    *,
    causal=True,
    scale=None,
    sm_count: int | None = None,
    min_keys: int = 64,
    backend: str = "auto",
):
    """``attention-prefill`` signature with the same heuristic (batch = number of sequences)."""
    sms = _sms(q, sm_count)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    nseq = len(cq) - 1
    if nseq == 0:
        return torch.empty_like(q)
    if _use_triton(q, backend):
        from ..attention.triton_attn import prefill_varlen_triton

        lmax = max(b - a for a, b in zip(ck[:-1], ck[1:], strict=True))
        split = heuristic_split_size(num_splits(nseq, k.shape[1], lmax, sms, min_keys=min_keys), lmax)
        return prefill_varlen_triton(
            q, k, v, cu_seqlens_q, cu_seqlens_k, causal=causal, scale=scale, split_size=split
        )
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[2])
    outs = []
    for i in range(nseq):
        ki, vi = k[ck[i] : ck[i + 1]], v[ck[i] : ck[i + 1]]
        n = num_splits(nseq, k.shape[1], ki.shape[0], sms, min_keys=min_keys)
        outs.append(splitkv_attend(q[cq[i] : cq[i + 1]], ki, vi, n, causal=causal, scale=sc))
    return torch.cat(outs)


def varying_sm_count(fn, counts: tuple[int, ...] = (132, 66, 33, 8)):
    """``fn`` (a split-KV mutant) given a different SM budget on each call.

    Models a GPU shared with other work (MPS, green contexts, a concurrent stream):
    the occupancy heuristic then changes the split count between identical calls.
    The positive control of the ``run-to-run`` oracle.
    """
    state = {"calls": 0}

    def run(*args, **kw):
        kw["sm_count"] = counts[state["calls"] % len(counts)]
        state["calls"] += 1
        return fn(*args, **kw)

    run.__name__ = f"{getattr(fn, '__name__', 'fn')}_varying_sms"
    return run
