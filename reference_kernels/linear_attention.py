"""A linear-attention / SSM scan with a scalar gate per head and token (Mamba-2 SSD's form,
gated linear attention with a scalar decay): ``S_t = exp(g_t) S_{t-1} + k_t v_t^T``,
``o_t = q_t . S_t``.

Family ``linear-attention``: ``fn(q[B, T, H, DK], k[B, T, H, DK], v[B, T, H, DV], g[B, T, H],
state[B, H, DK, DV] fp32 or None) -> (o[B, T, H, DV] of v's dtype, state fp32)``; ``g <= 0`` is
the log decay. A call with T = 1 and a state is a decode step; a call with a state and T > 1 is
a chunk of a chunked prefill.

Reference: the recurrence itself, token by token, one fixed order per (sequence, head): the same
arithmetic for a whole prefill, any chunking of it and decode, so all three agree bit for bit,
and no sequence reads another. On CPU the decay is ``detmath.det_exp`` (CPU ``exp`` takes SIMD or
scalar-tail paths by position in the buffer) and the sum over DK a pairwise ``tree_sum``; on CUDA
one Triton program per (sequence, head, DV block) keeps the state in registers
(``linear_attention_triton``). Stock (``torch-chunked``): what engines ship, a chunked scan for
prefill (chunks of ``CHUNK`` tokens from the start of each call: intra-chunk matmuls, state
passed between chunks) and the recurrent step for decode (T = 1).
"""

from __future__ import annotations

import torch

from .device import resolve
from .moe.detmath import det_exp
from .moe.tree import tree_sum

CHUNK = 64


def _check(q, k, v, g, state) -> None:
    b, t, h, dk = q.shape
    if k.shape != q.shape or v.shape[:3] != (b, t, h) or g.shape != (b, t, h):
        raise ValueError(f"expected q, k [B, T, H, DK], v [B, T, H, DV], g [B, T, H]; got {tuple(q.shape)},"
                         f" {tuple(k.shape)}, {tuple(v.shape)}, {tuple(g.shape)}")  # fmt: skip
    if state is not None and state.shape != (b, h, dk, v.shape[3]):
        raise ValueError(f"state must be [B, H, DK, DV] = {(b, h, dk, v.shape[3])}, got {tuple(state.shape)}")


def scan(q, k, v, g, state=None, *, backend: str | None = None):
    """Reference scan (see the module docstring)."""
    _check(q, k, v, g, state)
    if resolve(q, backend) != "torch":
        from .linear_attention_triton import scan_triton

        return scan_triton(q, k, v, g, state)
    b, t, h, dk = q.shape
    s = torch.zeros((b, h, dk, v.shape[3]), dtype=torch.float32, device=q.device) if state is None else state.float()
    decay = det_exp(g.float())  # [B, T, H]
    qf, kf, vf = q.float(), k.float(), v.float()
    outs = []
    for i in range(t):
        s = s * decay[:, i, :, None, None] + kf[:, i, :, :, None] * vf[:, i, :, None, :]
        outs.append(tree_sum((qf[:, i, :, :, None] * s).transpose(-1, -2)))  # [B, H, DV]
    o = torch.stack(outs, dim=1) if outs else vf.new_zeros(v.shape)
    return o.to(v.dtype), s


def scan_interpret(q, k, v, g, state=None):
    return scan(q, k, v, g, state, backend="interpret")


def recurrent_step(q, k, v, g, state):
    """Stock decode: one token's update with torch's own ops (``selective_state_update``'s math)."""
    s = state.float() * torch.exp(g.float())[:, 0, :, None, None] + k.float()[:, 0, :, :, None] * v.float()[:, 0, :, None, :]
    o = torch.einsum("bhk,bhkv->bhv", q.float()[:, 0], s)
    return o[:, None].to(v.dtype), s


def chunked_scan(q, k, v, g, state=None, chunk: int = CHUNK):
    """The chunked form (Mamba-2 SSD's minimal algorithm): per chunk, decay-masked ``q k^T`` times
    ``v`` plus the incoming state's contribution; the state carried chunk to chunk."""
    b, t, h, dk = q.shape
    s = torch.zeros((b, h, dk, v.shape[3]), dtype=torch.float32, device=q.device) if state is None else state.float()
    qf, kf, vf, gf = (a.float().transpose(1, 2) for a in (q, k, v, g))  # [B, H, T, ...]
    outs = []
    for lo in range(0, t, chunk):
        hi = min(t, lo + chunk)
        qc, kc, vc, gc = qf[:, :, lo:hi], kf[:, :, lo:hi], vf[:, :, lo:hi], gf[:, :, lo:hi]
        cum = torch.cumsum(gc, dim=-1)  # [B, H, C]
        seg = cum[..., :, None] - cum[..., None, :]
        causal = torch.ones(hi - lo, hi - lo, dtype=torch.bool, device=q.device).tril()
        att = (qc @ kc.transpose(-1, -2)) * torch.exp(seg.masked_fill(~causal, float("-inf")))
        o = att @ vc + (qc * torch.exp(cum)[..., None]) @ s
        s = s * torch.exp(cum[..., -1])[..., None, None] + (kc * torch.exp(cum[..., -1:] - cum)[..., None]).transpose(-1, -2) @ vc
        outs.append(o)
    o = torch.cat(outs, dim=2).transpose(1, 2) if outs else vf.transpose(1, 2).new_zeros(v.shape)
    return o.to(v.dtype), s


def stock_chunked(q, k, v, g, state=None):
    """Stock: the chunked scan for prefill, the recurrent step for decode (T = 1 with a state)."""
    _check(q, k, v, g, state)
    if q.shape[1] == 1 and state is not None:
        return recurrent_step(q, k, v, g, state)
    return chunked_scan(q, k, v, g, state)
