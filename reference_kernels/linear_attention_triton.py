"""Reference scan in Triton: one program per (sequence, head, DV block), the state block
``[DK, BLOCK_DV]`` in fp32 registers, tokens walked in order: ``S = exp(g) S + k v^T``,
``o = sum_k q S`` (one in-block tree over DK); no program reads another sequence.

Prefill, any chunking of it and decode agree bit for bit by construction, not by luck: every call
runs ONE compiled binary. The state is always read (zeros for a fresh prefill) rather than a
``HAS_STATE`` variant, ``T`` is not specialized (the JIT would otherwise compile T == 1 and T % 16
== 0 as their own kernels), and the kernel is compiled without FMA contraction, so each ``*`` and
``+`` is rounded on its own and no compiler choice of which product to fuse can differ between
variants. A piece boundary is then only the fp32 state going through memory, which is exact.
(The H200 run of the first version, with ``HAS_STATE`` and a specialized ``T``, differed by up to
112 ULP under chunking and by 1 bf16 ULP at decode; on CPU, where nothing is contracted, it agreed.)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .device import cdiv
from .keyed_launch import launch

FP_FUSION = False  # no FMA contraction: see the module docstring (tests compile the kernel with it)
SCAN_WARPS = 4
BLOCK_DV_MAX = 16  # benchmarks/sweep_scan_tiles.py on the H200: 0.53 -> 0.67 of the chunked stock at one sequence (graph), bits kept


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@triton.jit(do_not_specialize=["T"])
def _scan_kernel(Q, K, V, G, S0, OUT, SOUT, T, H, DK, DV, BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    pid_v = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_k = tl.arange(0, BLOCK_DK)
    offs_v = pid_v * BLOCK_DV + tl.arange(0, BLOCK_DV)
    mk = offs_k < DK
    mv = offs_v < DV
    s_ptr = bh * DK * DV + offs_k[:, None] * DV + offs_v[None, :]
    s = tl.load(S0 + s_ptr, mask=mk[:, None] & mv[None, :], other=0.0)
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


def scan_triton(q, k, v, g, state=None, *, block_dv: int | None = None, warps: int | None = None):
    """``(o, final state)``; ``block_dv``/``warps`` override the one configuration (a sweep's knobs,
    never chosen from the batch)."""
    b, t, h, dk = q.shape
    dv = v.shape[3]
    q, k, v, g = q.contiguous(), k.contiguous(), v.contiguous(), g.float().contiguous()
    o = torch.empty(v.shape, dtype=torch.float32 if not v.is_cuda else v.dtype, device=v.device)
    s_out = torch.empty((b, h, dk, dv), dtype=torch.float32, device=v.device)
    s0 = state.float().contiguous() if state is not None else torch.zeros_like(s_out)
    block_dv = block_dv or min(_pow2(dv), BLOCK_DV_MAX)
    if b and h:
        launch(_scan_kernel, (b * h, cdiv(dv, block_dv)), (q, k, v, g, s0, o, s_out, t, h, dk, dv),
               {"BLOCK_DK": _pow2(dk), "BLOCK_DV": block_dv}, warps or SCAN_WARPS, fp_fusion=FP_FUSION)  # fmt: skip
    return o.to(v.dtype), s_out
