"""``F.scaled_dot_product_attention`` semantics on the batch-invariant reference attention.

What ``enable()`` routes ``aten::scaled_dot_product_attention`` to, so a model that calls SDPA
(Hugging Face's default attention) is batch invariant without edits. Covered: dense causal
(SDPA's top-left alignment) and non-causal, GQA (``enable_gqa``), and an explicit mask where
every query row allows one contiguous run of keys (a causal mask, right or left padding, the
block-diagonal causal mask of sequences packed into one row as ``transformers``' continuous
batching builds it, a sliding window), given as bool or as an additive 0 / very-negative float
mask. Not covered, and returned as None so the stock kernel runs and the census names it:
dropout, an additive mask with other values (ALiBi-style biases), a row whose allowed keys have
gaps, per-head masks, non-4-D inputs.
"""

from __future__ import annotations

import torch

from .split import SPLIT_SIZE
from .torch_ref import attend_rows


def _windows(mask: torch.Tensor | None, causal: bool, b: int, hq: int, lq: int, lk: int,
             device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:  # fmt: skip
    """(first key, number of keys) each query row ``[B*Lq]`` sees, or None when the allowed keys of
    a row are not one contiguous run (or differ between heads)."""
    k_pos = torch.arange(lk, device=device)
    allowed = torch.ones((b, lq, lk), dtype=torch.bool, device=device)
    if causal:
        allowed &= k_pos[None, None, :] <= torch.arange(lq, device=device)[None, :, None]
    if mask is not None:
        if mask.dtype == torch.bool:
            given = mask
        else:
            neg = mask <= torch.finfo(mask.dtype).min / 2
            if not bool(((mask == 0) | neg).all()):
                return None
            given = ~neg
        given = given.expand(b, hq, lq, lk)
        if not bool((given == given[:, :1]).all()):  # per-head masks: not covered
            return None
        allowed &= given[:, 0]
    n = allowed.sum(-1)
    lo = torch.where(n > 0, allowed.to(torch.uint8).argmax(-1), 0)
    run = (k_pos[None, None, :] >= lo[..., None]) & (k_pos[None, None, :] < (lo + n)[..., None])
    if not bool((run == allowed).all()):
        return None
    return lo.reshape(-1), n.reshape(-1)


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
    window = _windows(attn_mask, is_causal, b, hq, lq, lk, q.device)
    if window is None:
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
        # Each row reads its own run of keys, counted from the run's first key: where the run sits
        # among the keys (a request packed after others, as continuous batching lays them out)
        # changes which slots are read, not how the keys are split and summed.
        lo, n = window
        base = torch.arange(b, device=q.device).repeat_interleave(lq) * lk + lo
        rows = torch.arange(b * lq, device=q.device)
        out = attend_rows(qr, kr, vr, rows, n, lambda row, pos: base[row] + pos, scale=scale, split_size=SPLIT_SIZE)
    return out.reshape(b, lq, hq, d).transpose(1, 2)
