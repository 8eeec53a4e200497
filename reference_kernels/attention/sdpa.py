"""``F.scaled_dot_product_attention`` semantics on the batch-invariant reference attention.

What ``enable()`` routes ``aten::scaled_dot_product_attention`` to, so a model that calls SDPA
(Hugging Face's default attention) is batch invariant without edits. Covered: dense causal
(SDPA's top-left alignment) and non-causal, GQA (``enable_gqa``), and an explicit mask where
every query row allows a prefix of the keys (a causal mask, right padding), given as bool or as
an additive 0 / very-negative float mask. Not covered, and returned as None so the stock kernel
runs and the census names it: dropout, an additive mask with other values (ALiBi-style biases),
a mask whose allowed keys are not a prefix (left padding, sliding windows), non-4-D inputs.
"""

from __future__ import annotations

import torch

from .split import SPLIT_SIZE
from .torch_ref import attend_rows


def _limits(mask: torch.Tensor | None, causal: bool, b: int, hq: int, lq: int, lk: int,
            device: torch.device) -> torch.Tensor | None:  # fmt: skip
    """Keys each query row ``[B*Lq]`` sees (a prefix length), or None when the mask is no prefix."""
    q_pos = torch.arange(lq, device=device)
    limit = torch.full((b, lq), lk, dtype=torch.long, device=device)
    if causal:
        limit = torch.minimum(limit, (q_pos + 1)[None, :])
    if mask is not None:
        if mask.dtype == torch.bool:
            allowed = mask
        else:
            neg = mask <= torch.finfo(mask.dtype).min / 2
            if not bool(((mask == 0) | neg).all()):
                return None
            allowed = ~neg
        allowed = allowed.expand(b, hq, lq, lk)
        if not bool((allowed == allowed[:, :1]).all()):  # per-head masks: not covered
            return None
        allowed = allowed[:, 0]
        n = allowed.sum(-1)
        prefix = torch.arange(lk, device=device)[None, None, :] < n[..., None]
        if not bool((prefix == allowed).all()):
            return None
        limit = torch.minimum(limit, n)
    return limit.reshape(-1)


def sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor | None:
    """SDPA over ``q[B, Hq, Lq, D]``, ``k, v[B, Hkv, Lk, D]``; None where not covered (see module)."""
    if dropout_p or q.dim() != 4 or k.dim() != 4 or v.shape != k.shape or q.shape[-1] != k.shape[-1]:
        return None
    if scale is not None and not scale > 0:  # the reference takes the row max before scaling
        return None
    b, hq, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    if (hq != hkv and not enable_gqa) or hq % hkv or k.shape[0] != b:
        return None
    limit = _limits(attn_mask, is_causal, b, hq, lq, lk, q.device)
    if limit is None:
        return None
    qr = q.transpose(1, 2).reshape(b * lq, hq, d)
    kr = k.transpose(1, 2).reshape(b * lk, hkv, d)
    vr = v.transpose(1, 2).reshape(b * lk, hkv, d)
    if attn_mask is None and (not is_causal or lq == lk):
        from . import prefill_varlen  # Triton on CUDA, the torch path on CPU

        cu_q = torch.arange(b + 1, device=q.device, dtype=torch.int32) * lq
        cu_k = torch.arange(b + 1, device=q.device, dtype=torch.int32) * lk
        out = prefill_varlen(qr, kr, vr, cu_q, cu_k, causal=is_causal, scale=scale, split_size=SPLIT_SIZE)
    else:
        row_seq = torch.arange(b, device=q.device).repeat_interleave(lq)
        out = attend_rows(qr, kr, vr, row_seq, limit, lambda seq, pos: seq * lk + pos, scale=scale, split_size=SPLIT_SIZE)
    return out.reshape(b, lq, hq, d).transpose(1, 2)
