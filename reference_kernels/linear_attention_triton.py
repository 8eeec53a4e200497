"""Reference scan in Triton: one program per (sequence, head, DV block), the state block
``[DK, BLOCK_DV]`` in fp32 registers, tokens walked in order: ``S = exp(g) S + k v^T``,
``o = sum_k q S`` (one in-block tree over DK). A decode step (T = 1) runs the same loop body, so
prefill, chunked prefill and decode agree bit for bit; no program reads another sequence.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .device import cdiv
from .keyed_launch import launch


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@triton.jit
def _scan_kernel(Q, K, V, G, S0, OUT, SOUT, T, H, DK, DV, HAS_STATE: tl.constexpr,
                 BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr):  # fmt: skip
    bh = tl.program_id(0).to(tl.int64)
    pid_v = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_k = tl.arange(0, BLOCK_DK)
    offs_v = pid_v * BLOCK_DV + tl.arange(0, BLOCK_DV)
    mk = offs_k < DK
    mv = offs_v < DV
    s_ptr = bh * DK * DV + offs_k[:, None] * DV + offs_v[None, :]
    if HAS_STATE:
        s = tl.load(S0 + s_ptr, mask=mk[:, None] & mv[None, :], other=0.0)
    else:
        s = tl.zeros((BLOCK_DK, BLOCK_DV), dtype=tl.float32)
    for t in range(0, T):
        row = (b * T + t) * H + h
        q = tl.load(Q + row * DK + offs_k, mask=mk, other=0.0).to(tl.float32)
        k = tl.load(K + row * DK + offs_k, mask=mk, other=0.0).to(tl.float32)
        v = tl.load(V + row * DV + offs_v, mask=mv, other=0.0).to(tl.float32)
        a = tl.exp(tl.load(G + row).to(tl.float32))
        s = s * a + k[:, None] * v[None, :]
        o = tl.sum(q[:, None] * s, axis=0)
        tl.store(OUT + row * DV + offs_v, o.to(OUT.dtype.element_ty), mask=mv)
    tl.store(SOUT + s_ptr, s, mask=mk[:, None] & mv[None, :])


def scan_triton(q, k, v, g, state=None):
    b, t, h, dk = q.shape
    dv = v.shape[3]
    q, k, v, g = q.contiguous(), k.contiguous(), v.contiguous(), g.float().contiguous()
    o = torch.empty(v.shape, dtype=torch.float32 if not v.is_cuda else v.dtype, device=v.device)
    s_out = torch.empty((b, h, dk, dv), dtype=torch.float32, device=v.device)
    s0 = state.float().contiguous() if state is not None else s_out
    block_dv = min(_pow2(dv), 32)
    if b and h:
        launch(_scan_kernel, (b * h, cdiv(dv, block_dv)), (q, k, v, g, s0, o, s_out, t, h, dk, dv),
               {"HAS_STATE": state is not None, "BLOCK_DK": _pow2(dk), "BLOCK_DV": block_dv}, 4)  # fmt: skip
    return o.to(v.dtype), s_out
