"""Multi-LoRA: each token adds its own adapter's low-rank update, or none.

Family ``lora``: ``fn(x[M, H], base[M, N], lora_a[L, R, H], lora_b[L, N, R], ids[M] int64,
scale) -> [M, N]`` of x's dtype: ``base + scale * (x @ A[id].T) @ B[id].T`` for a token with
adapter ``id >= 0``, ``base`` bit for bit for a token with ``id == -1`` (shrink then expand, as
vLLM's ``lora_shrink`` / ``lora_expand`` pair).

Reference numerics, per token and nothing else: shrink ``y[r] = scale * sum_h x[h] A[id, r, h]``
in fp32 in one fixed order, expand ``out[n] = base[n] + sum_r y[r] B[id, n, r]`` in fp32 in one
fixed order, rounded once. On CPU the sums are the pairwise ``tree_sum`` over gathered weights
(no BLAS sees how many tokens share an adapter); on CUDA the Triton kernels of ``lora_triton``
(one program per token for the shrink, per token and N block for the expand). Stock: the
per-adapter loop of PEFT-style code (``F.linear`` over the tokens of each adapter: M is how many
neighbours share it) and vLLM's torch ops (``bgmv``: einsum over gathered weights).
"""

from __future__ import annotations

import torch

from .device import resolve
from .moe.tree import tree_sum


def _check(x, base, lora_a, lora_b, ids) -> None:
    if x.dim() != 2 or base.dim() != 2 or x.shape[0] != base.shape[0] or ids.shape != (x.shape[0],):
        raise ValueError(f"expected x[M, H], base[M, N], ids[M]; got {tuple(x.shape)}, {tuple(base.shape)}, {tuple(ids.shape)}")
    if lora_a.dim() != 3 or lora_b.dim() != 3 or lora_a.shape[2] != x.shape[1] or lora_b.shape[1] != base.shape[1]:
        raise ValueError(f"expected lora_a[L, R, H], lora_b[L, N, R]; got {tuple(lora_a.shape)}, {tuple(lora_b.shape)}")


def lora_apply(x, base, lora_a, lora_b, ids, scale: float = 1.0, *, backend: str | None = None) -> torch.Tensor:
    """Reference multi-LoRA shrink + expand (see the module docstring)."""
    _check(x, base, lora_a, lora_b, ids)
    if resolve(x, backend) != "torch":
        from .lora_triton import lora_triton

        return lora_triton(x, base, lora_a, lora_b, ids, float(scale))
    has = ids >= 0
    safe = ids.clamp(min=0)
    y = tree_sum(lora_a[safe].float() * x.float()[:, None, :]) * float(scale)  # [M, R]
    delta = tree_sum(lora_b[safe].float() * y[:, None, :])  # [M, N]
    out = (base.float() + delta).to(base.dtype)
    return torch.where(has[:, None], out, base)


def lora_apply_interpret(x, base, lora_a, lora_b, ids, scale: float = 1.0) -> torch.Tensor:
    return lora_apply(x, base, lora_a, lora_b, ids, scale, backend="interpret")


def stock_adapter_loop(x, base, lora_a, lora_b, ids, scale: float = 1.0) -> torch.Tensor:
    """Stock (PEFT-style): for each adapter in use, its tokens' shrink and expand with ``F.linear``."""
    F = torch.nn.functional
    out = base.clone()
    for a in torch.unique(ids[ids >= 0]).tolist():
        rows = (ids == a).nonzero().flatten()
        y = F.linear(x[rows], lora_a[a]) * scale
        out[rows] = (base[rows].float() + F.linear(y, lora_b[a]).float()).to(base.dtype)
    return out


def stock_bgmv(x, base, lora_a, lora_b, ids, scale: float = 1.0) -> torch.Tensor:
    """Stock (vLLM's torch ops ``bgmv_shrink`` / ``bgmv_expand``): einsum over gathered weights in fp32."""
    has = ids >= 0
    safe = ids.clamp(min=0)
    y = torch.einsum("bi,boi->bo", x.float(), lora_a[safe].float()) * scale
    delta = torch.einsum("bi,boi->bo", y, lora_b[safe].float())
    return torch.where(has[:, None], (base.float() + delta).to(base.dtype), base)
