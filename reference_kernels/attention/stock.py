"""Stock attention (PyTorch SDPA per backend, FlexAttention) behind the family signatures.

These are *measured*, not trusted: the suites record what each backend really does
with batch size. Prefill batches sequences into one SDPA call when they all have the
same query and key lengths (a real batch dimension, which is what a backend's
heuristics see); mixed lengths run one call per sequence. Decode gathers each
sequence's K/V from the paged cache (an exact copy) into ``[B, Hkv, L, D]``; equal
lengths need no mask (so the flash backend runs), mixed lengths use a boolean mask.
FlexAttention runs under ``torch.compile`` with its default shape handling, as users
run it: the first shape compiles a static kernel, a second shape recompiles with
dynamic sizes that later shapes reuse (so batch 1 and batch N may run different code;
the suites measure whether that shows in the bits).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F

SDPA_BACKENDS = ("flash", "efficient", "cudnn", "math")
# Backends PyTorch implements on CPU; the others are CUDA-only.
CPU_BACKENDS = ("flash", "math")


def _backend(name: str):
    from torch.nn.attention import SDPBackend

    return {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }[name]


def _sdpa(backend: str, q, k, v, *, causal_lower_right: bool, mask=None, scale=None) -> torch.Tensor:
    """q [B, Hq, Lq, D], k/v [B, Hkv, Lk, D]; causal aligned bottom-right (queries are the last Lq)."""
    from torch.nn.attention import sdpa_kernel

    lq, lk = q.shape[2], k.shape[2]
    kw: dict = {"scale": scale, "enable_gqa": q.shape[1] != k.shape[1]}
    with sdpa_kernel([_backend(backend)]):
        if mask is not None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
        if causal_lower_right and lq == lk:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)
        if causal_lower_right and lq != lk:
            from torch.nn.attention.bias import causal_lower_right as clr

            return F.scaled_dot_product_attention(q, k, v, attn_mask=clr(lq, lk), **kw)
        return F.scaled_dot_product_attention(q, k, v, **kw)


def _bhld(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(0, 1).unsqueeze(0)  # [L, H, D] -> [1, H, L, D]


def sdpa_prefill(backend: str) -> Callable:
    """``attention-prefill`` through SDPA with only ``backend`` enabled."""

    def prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=True, scale=None):
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        lq = [b - a for a, b in zip(cq[:-1], cq[1:], strict=False)]
        lk = [b - a for a, b in zip(ck[:-1], ck[1:], strict=False)]
        if len(set(lq)) == 1 and len(set(lk)) == 1:
            n, a, b = len(lq), lq[0], lk[0]
            qb = q.view(n, a, *q.shape[1:]).transpose(1, 2)
            kb = k.view(n, b, *k.shape[1:]).transpose(1, 2)
            vb = v.view(n, b, *v.shape[1:]).transpose(1, 2)
            out = _sdpa(backend, qb, kb, vb, causal_lower_right=causal, scale=scale)
            return out.transpose(1, 2).reshape(q.shape)
        outs = []
        for i in range(len(lq)):
            qi, ki, vi = q[cq[i] : cq[i + 1]], k[ck[i] : ck[i + 1]], v[ck[i] : ck[i + 1]]
            o = _sdpa(backend, _bhld(qi), _bhld(ki), _bhld(vi), causal_lower_right=causal, scale=scale)
            outs.append(o[0].transpose(0, 1))
        return torch.cat(outs)

    prefill.__name__ = f"sdpa_{backend}_prefill"
    return prefill


def gather_paged(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """``[B, Hkv, length, D]`` copy of the first ``length`` positions of each sequence."""
    bs = cache.shape[1]
    nblk = -(-length // bs)
    blocks = cache[block_table[:, :nblk].long()]  # [B, nblk, bs, Hkv, D]
    return blocks.flatten(1, 2)[:, :length].transpose(1, 2)


def sdpa_decode(backend: str) -> Callable:
    """``attention-decode`` through SDPA with only ``backend`` enabled."""

    def decode(q, k_cache, v_cache, block_table, seq_lens, *, scale=None):
        lens = seq_lens.tolist()
        lmax = max(lens)
        k = gather_paged(k_cache, block_table, lmax)
        v = gather_paged(v_cache, block_table, lmax)
        mask = None
        if len(set(lens)) > 1:
            ar = torch.arange(lmax, device=q.device)
            mask = (ar[None, :] < seq_lens.to(q.device)[:, None])[:, None, None, :]
        out = _sdpa(backend, q.unsqueeze(2), k, v, causal_lower_right=False, mask=mask, scale=scale)
        return out.squeeze(2)

    decode.__name__ = f"sdpa_{backend}_decode"
    return decode


FLEX_RECOMPILE_LIMIT = 64


@functools.lru_cache(maxsize=1)
def _flex():
    """Compiled FlexAttention, with room for the suites' many shapes and masks.

    Every call shares one compiled frame, and each new head layout, mask or
    shape class recompiles it; past torch.compile's recompile limit (8 by
    default) Flex silently runs its unfused eager path instead, and that is
    what a long session would then measure. The limit is raised for the
    process (a global torch setting: only the stock Flex wrappers need it).
    """
    import torch._dynamo
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    setattr(cfg, name, max(getattr(cfg, name), FLEX_RECOMPILE_LIMIT))
    return torch.compile(flex_attention), create_block_mask


def flex_prefill(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=True, scale=None):
    """``attention-prefill`` through compiled FlexAttention (equal lengths batched, else per sequence)."""
    flex, create_block_mask = _flex()
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    outs = []
    spans = list(zip(cq[:-1], cq[1:], ck[:-1], ck[1:], strict=False))
    lq = {b - a for a, b, _, _ in spans}
    lk = {d - c for _, _, c, d in spans}
    groups = [spans] if len(lq) == 1 and len(lk) == 1 else [[s] for s in spans]
    for grp in groups:
        qb = torch.stack([q[a:b] for a, b, _, _ in grp]).transpose(1, 2)
        kb = torch.stack([k[c:d] for _, _, c, d in grp]).transpose(1, 2)
        vb = torch.stack([v[c:d] for _, _, c, d in grp]).transpose(1, 2)
        a_, b_ = qb.shape[2], kb.shape[2]
        # The causal offset travels as a tensor: as a Python constant each new chunk
        # offset would recompile, and past torch.compile's recompile limit Flex falls
        # back to its unfused eager path, which would then be what gets measured.
        off = torch.tensor(b_ - a_, device=q.device)

        def causal_mod(b, h, qi, ki, off=off):
            return ki <= qi + off

        bm = create_block_mask(causal_mod, None, None, a_, b_, device=q.device) if causal else None
        o = flex(qb, kb, vb, block_mask=bm, scale=scale, enable_gqa=qb.shape[1] != kb.shape[1])
        outs.append(o.transpose(1, 2).reshape(-1, *q.shape[1:]))
    return torch.cat(outs)


def flex_decode(q, k_cache, v_cache, block_table, seq_lens, *, scale=None):
    """``attention-decode`` through compiled FlexAttention over the gathered cache."""
    flex, create_block_mask = _flex()
    lmax = int(seq_lens.max())
    k = gather_paged(k_cache, block_table, lmax)
    v = gather_paged(v_cache, block_table, lmax)
    lens = seq_lens.to(q.device)

    def len_mod(b, h, qi, ki):
        return ki < lens[b]

    bm = create_block_mask(len_mod, q.shape[0], None, 1, lmax, device=q.device)
    o = flex(q.unsqueeze(2), k, v, block_mask=bm, scale=scale, enable_gqa=q.shape[1] != k.shape[1])
    return o.squeeze(2)
