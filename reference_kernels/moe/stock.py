"""The stock MoE experts: the straightforward per-expert loop.

Each expert gathers the tokens routed to it and runs two ``torch.mm`` calls
whose M is that expert's token count, so the GEMM library picks its kernel
(tile shape, split-K) from how many *other* tokens chose the same expert; the
weighted outputs are scattered back with ``index_add_`` (atomics on CUDA).
This is what the suites measure the reference against, never expect of it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .experts_torch import check_shapes


def experts_loop(
    x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor
) -> torch.Tensor:
    """Per-expert gather, ``torch.mm`` x2 with SwiGLU, weighted ``index_add_`` in fp32."""
    check_shapes(x, w_gate_up, w_down, weights, ids)
    t, h = x.shape
    i = w_down.shape[2]
    out = torch.zeros((t, h), dtype=torch.float32, device=x.device)
    for e in torch.unique(ids).tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        gu = torch.mm(x[tok], w_gate_up[e].t())
        act = F.silu(gu[:, :i]) * gu[:, i:]
        y = torch.mm(act, w_down[e].t())
        out.index_add_(0, tok, y.float() * weights[tok, slot, None].float())
    return out.to(x.dtype)
