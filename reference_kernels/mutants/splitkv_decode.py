"""Mutant: split-KV decode whose number of splits comes from batch size and SM count.

FlashDecoding-style schedulers split each sequence's KV so that
``batch x kv_heads x splits`` fills the GPU: few sequences -> many splits, a full
batch -> one. The split *count* (hence the split boundaries and the merge) then
depends on what else is in the batch, and a sequence's output bits change with the
batch size. This is the positive control of the ``attention-decode`` suites and must
come out ``divergent``. Plain torch (CPU or CUDA): partials per split in fp32
(softmax over the split, log-sum-exp merge), as the real kernels do.
"""

from __future__ import annotations

import math

import torch

from ..attention.stock import gather_paged

DEFAULT_SMS = 132  # H100/H200 SXM


def num_splits(
    batch: int, kv_heads: int, kv_len: int, sm_count: int = DEFAULT_SMS, max_splits: int = 64
) -> int:
    """Occupancy heuristic: enough splits for ~one wave of programs, at least 64 keys per split."""
    programs = max(1, batch * kv_heads)
    want = max(1, -(-sm_count // programs))
    return max(1, min(want, max_splits, -(-kv_len // 64)))


def splitkv_decode(q, k_cache, v_cache, block_table, seq_lens, *, scale=None, sm_count: int | None = None):
    """``attention-decode`` signature; KV cut into ``num_splits(B, Hkv, L)`` near-equal parts."""
    if sm_count is None:
        sm_count = (
            torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else DEFAULT_SMS
        )
    b, hq, d = q.shape
    hkv = k_cache.shape[2]
    g = hq // hkv
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    out = torch.empty_like(q)
    for i in range(b):
        length = int(seq_lens[i])
        k = gather_paged(k_cache, block_table[i : i + 1], length)[0].float()  # [Hkv, L, D]
        v = gather_paged(v_cache, block_table[i : i + 1], length)[0].float()
        qi = q[i].float().view(hkv, g, d)
        n = num_splits(b, hkv, length, sm_count)
        bounds = [round(j * length / n) for j in range(n + 1)]
        ms, ls, os_ = [], [], []
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=False):
            s = torch.einsum("hgd,hld->hgl", qi, k[:, lo:hi]) * sc
            m = s.amax(-1, keepdim=True)
            p = torch.exp(s - m)
            ms.append(m)
            ls.append(p.sum(-1, keepdim=True))
            os_.append(torch.einsum("hgl,hld->hgd", p, v[:, lo:hi]))
        mx = torch.stack(ms).amax(0)
        num = sum(o * torch.exp(m - mx) for o, m in zip(os_, ms, strict=False))
        den = sum(lsum * torch.exp(m - mx) for lsum, m in zip(ls, ms, strict=False))
        out[i] = (num / den).reshape(hq, d).to(q.dtype)
    return out


def register_splitkv_decode() -> None:
    """Add the mutant to the kernel registry under ``mutant:splitkv-decode``."""
    from ..registry import register

    register(
        "attention-decode",
        "mutant:splitkv-decode",
        splitkv_decode,
        role="mutant",
        description="split-KV decode, split count from batch x kv heads vs SM count (FlashDecoding-style)",
    )
