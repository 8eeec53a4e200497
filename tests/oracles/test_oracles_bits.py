"""Bit views and ULP distance: properties that must hold for every value."""

from __future__ import annotations

import math
import struct

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pytest_invariance.oracles.bits import bit_view, ordered_int, ulp_distance

finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
FLOAT_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2]


def f32(x: float) -> torch.Tensor:
    return torch.tensor([x], dtype=torch.float32)


@given(finite32)
def test_fp32_bit_view_matches_struct(x: float) -> None:
    expected = struct.unpack("<i", struct.pack("<f", x))[0]
    assert int(bit_view(f32(x))[0]) == expected


@given(finite32, finite32)
def test_ulp_is_symmetric_and_zero_only_for_equal_values(a: float, b: float) -> None:
    ta, tb = f32(a), f32(b)
    d = float(ulp_distance(ta, tb)[0])
    assert d == float(ulp_distance(tb, ta)[0])
    assert (d == 0) == (a == b)


@given(finite32)
def test_next_float_is_one_ulp_away(x: float) -> None:
    t = f32(x)
    up = torch.nextafter(t, torch.tensor([math.inf]))
    if torch.isfinite(up).all():
        assert float(ulp_distance(t, up)[0]) == 1.0


@given(finite32, finite32, finite32)
def test_ulp_triangle_inequality_on_the_ordered_line(a: float, b: float, c: float) -> None:
    ab = float(ulp_distance(f32(a), f32(b))[0])
    bc = float(ulp_distance(f32(b), f32(c))[0])
    ac = float(ulp_distance(f32(a), f32(c))[0])
    assert ac <= ab + bc


@given(finite32, finite32)
def test_ordered_int_is_monotone(a: float, b: float) -> None:
    ka, kb = int(ordered_int(f32(a))[0]), int(ordered_int(f32(b))[0])
    if a < b:
        assert ka < kb
    elif a == b:
        assert ka == kb


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_signed_zeros_are_zero_ulp_apart_but_bitwise_different(dtype: torch.dtype) -> None:
    pz, nz = torch.tensor([0.0]).to(dtype), torch.tensor([-0.0]).to(dtype)
    assert float(ulp_distance(pz, nz)[0]) == 0.0
    assert int(bit_view(pz)[0]) != int(bit_view(nz)[0])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_nan_handling_is_explicit(dtype: torch.dtype) -> None:
    nan = torch.tensor([math.nan]).to(dtype)
    one = torch.tensor([1.0]).to(dtype)
    assert float(ulp_distance(nan, nan)[0]) == 0.0
    assert float(ulp_distance(nan, one)[0]) == math.inf


@pytest.mark.parametrize("dtype", FLOAT_DTYPES[1:])
def test_every_adjacent_pair_of_the_small_formats_is_one_ulp(dtype: torch.dtype) -> None:
    """Walk the positive finite values of the 8/16-bit formats in bit order."""
    width = 8 if dtype.itemsize == 1 else 16
    int_dtype = torch.uint8 if width == 8 else torch.int16
    top = 0x7F if width == 8 else 0x7FFF
    bits = torch.arange(0, top + 1, dtype=torch.int64).to(int_dtype)
    vals = bits.view(dtype)
    finite = torch.isfinite(vals.to(torch.float32))
    vals = vals[finite]
    d = ulp_distance(vals[:-1], vals[1:])
    assert torch.all(d == 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2])
def test_bit_view_width(dtype: torch.dtype) -> None:
    t = torch.tensor([1.5, -2.25]).to(dtype)
    v = bit_view(t)
    assert v.element_size() == t.element_size()
    assert not v.is_floating_point()


def test_distance_across_zero_counts_both_sides() -> None:
    tiny = torch.tensor([1e-45], dtype=torch.float32)  # smallest positive denormal
    assert float(ulp_distance(tiny, -tiny)[0]) == 2.0


@settings(max_examples=50)
@given(st.lists(finite32, min_size=1, max_size=20))
def test_bf16_ulp_agrees_with_counting_representable_values(values: list[float]) -> None:
    a = torch.tensor(values, dtype=torch.float32).to(torch.bfloat16)
    b = torch.nextafter(a, torch.full_like(a, math.inf))
    ok = torch.isfinite(b.to(torch.float32))
    assert torch.all(ulp_distance(a[ok], b[ok]) == 1)
