"""Bit views and ULP distance.

Bitwise comparison goes through integer views so that two floats are equal
only when every bit is: NaN payloads, signed zeros and denormals included.
ULP distance maps each float's bits to a monotone integer line (sign-magnitude
to two's complement), on which +0 and -0 coincide and adjacent floats differ
by one.
"""

from __future__ import annotations

import torch

# Integer dtype of the same width, per float dtype.
_INT_VIEW: dict[torch.dtype, torch.dtype] = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _name):
        _INT_VIEW[getattr(torch, _name)] = torch.uint8

_WIDTH = {torch.int64: 64, torch.int32: 32, torch.int16: 16, torch.uint8: 8}

# A NaN on one side only is infinitely far away.
NAN_MISMATCH_ULP = float("inf")


def int_view_dtype(dtype: torch.dtype) -> torch.dtype:
    try:
        return _INT_VIEW[dtype]
    except KeyError:
        raise TypeError(f"no integer view for dtype {dtype}") from None


def bit_view(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as a same-width integer tensor (no copy for contiguous input)."""
    if not t.is_floating_point():
        return t
    return t.contiguous().view(int_view_dtype(t.dtype))


def ordered_int(t: torch.Tensor) -> torch.Tensor:
    """Monotone int64 image of float bits: x < y as floats implies key(x) < key(y).

    +0 and -0 both map to 0. NaNs map somewhere; callers mask them explicitly.
    """
    bits = bit_view(t)
    width = _WIDTH[bits.dtype]
    if bits.dtype == torch.uint8:
        raw = bits.to(torch.int64)
        sign = (raw >> 7) & 1
        mag = raw & 0x7F
    elif width == 64:
        raw = bits
        sign = (raw < 0).to(torch.int64)
        mag = raw & 0x7FFFFFFFFFFFFFFF
    else:
        raw = bits.to(torch.int64)
        sign = (raw < 0).to(torch.int64)
        mag = raw & ((1 << (width - 1)) - 1)
    return torch.where(sign.bool(), -mag, mag)


def _isnan(t: torch.Tensor) -> torch.Tensor:
    if t.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        return torch.isnan(t)
    return torch.isnan(t.to(torch.float32))


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise ULP distance in the tensors' native dtype, as float64.

    Both NaN: 0 (whatever the payload; bitwise comparison still sees a payload
    change). One NaN: ``inf``. Otherwise the distance along the monotone integer
    line, so +0 vs -0 is 0 and the smallest positive denormal vs -0 is 1.
    """
    if a.dtype != b.dtype:
        raise TypeError(f"dtype mismatch: {a.dtype} vs {b.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {tuple(a.shape)} vs {tuple(b.shape)}")
    if not a.is_floating_point():
        return (a.to(torch.int64) - b.to(torch.int64)).abs().to(torch.float64)
    ka, kb = ordered_int(a), ordered_int(b)
    if a.dtype == torch.float64:
        # int64 subtraction could overflow across the whole line; float is exact enough here.
        dist = (ka.to(torch.float64) - kb.to(torch.float64)).abs()
    else:
        dist = (ka - kb).abs().to(torch.float64)
    na, nb = _isnan(a), _isnan(b)
    dist = torch.where(na & nb, torch.zeros_like(dist), dist)
    dist = torch.where(na ^ nb, torch.full_like(dist, NAN_MISMATCH_ULP), dist)
    return dist
