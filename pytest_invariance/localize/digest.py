"""Exact digests of a tensor's bits, kept on its device.

A batched run is compared with the probe-alone run op by op; keeping every input of every op of
both runs would hold the whole forward pass twice. A digest is two integer sums over the bits
(one plain, one position-weighted), so two tensors with equal digests are bitwise equal unless
two 64-bit sums collide at once. Integer sums are exact in any order, so the digest itself never
depends on how the reduction is scheduled. Tensors that alias the model's own parameters are
named by their storage, offset, shape and stride instead of being read.
"""

from __future__ import annotations

import torch

from pytest_invariance.oracles.bits import bit_view

_CHUNK = 1 << 24  # elements per step: bounds the int64 temporaries of a large weight
_weights: dict[tuple[int, str], torch.Tensor] = {}


def _weight(n: int, device: torch.device) -> torch.Tensor:
    key = (n, str(device))
    w = _weights.get(key)
    if w is None:
        i = torch.arange(n, dtype=torch.int64, device=device)
        w = (i * 2654435761) % 2147483647 + 1  # < 2**31: products of 32-bit words stay in int64
        if len(_weights) > 64:
            _weights.clear()
        _weights[key] = w
    return w


def content_digest(t: torch.Tensor) -> torch.Tensor:
    """int64 [4] on ``t``'s device: numel, a dtype tag, the plain and the weighted bit sums."""
    flat = t.detach()
    if flat.is_floating_point() or flat.dtype == torch.bool or flat.is_complex():
        flat = bit_view(flat.contiguous()) if flat.is_floating_point() else flat.to(torch.int64)
    flat = flat.contiguous().reshape(-1)
    total = torch.zeros(2, dtype=torch.int64, device=flat.device)
    for lo in range(0, flat.numel(), _CHUNK):
        part = flat[lo : lo + _CHUNK].to(torch.int64)
        total[0] += part.sum()
        total[1] += (part * _weight(part.numel(), part.device)).sum()
    head = torch.tensor([t.numel(), _dtype_tag(t.dtype)], dtype=torch.int64, device=flat.device)
    return torch.cat([head, total])


def identity_digest(t: torch.Tensor) -> torch.Tensor:
    """A digest naming where ``t`` reads from: for views of parameters the run never writes."""
    parts = [-1, t.untyped_storage().data_ptr(), t.storage_offset(), t._version, *t.shape, *t.stride()]
    return torch.tensor(parts, dtype=torch.int64, device=t.device)


def _dtype_tag(dtype: torch.dtype) -> int:
    return sum(ord(c) for c in str(dtype))
