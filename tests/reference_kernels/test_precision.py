"""The fp32 precision check uses absolute bounds: every planted arithmetic is named for what it is,
on several seeds, and a switch that only turns on for large M is caught by the sizes variant."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from pytest_invariance.reference_kernels.precision import (  # noqa: E402
    BF16,
    IEEE,
    OTHER,
    TF32,
    classify_fp32_matmul,
    classify_fp32_matmul_sizes,
    round_mantissa,
)

PLANTED = {
    "ieee": (lambda x, w: F.linear(x, w), IEEE),
    "tf32 both operands": (lambda x, w: F.linear(round_mantissa(x, 10), round_mantissa(w, 10)), TF32),
    "tf32 on activations only": (lambda x, w: F.linear(round_mantissa(x, 10), w), TF32),
    "bf16-rounded output": (lambda x, w: F.linear(x, w).bfloat16().float(), BF16),
    "bf16 inputs": (lambda x, w: F.linear(round_mantissa(x, 7), round_mantissa(w, 7)), BF16),
    "3-bit inputs": (lambda x, w: F.linear(round_mantissa(x, 3), round_mantissa(w, 3)), OTHER),
}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", list(PLANTED))
def test_each_planted_arithmetic_is_named(name, seed):
    fn, want = PLANTED[name]
    res = classify_fp32_matmul(fn, seed=seed)
    assert res.precision_class == want, (name, res.scaled_error, res.errors)


def test_tf32_that_turns_on_at_large_m_is_caught_by_the_sizes_variant():
    def tf32_from_512_rows(x, w):
        return F.linear(round_mantissa(x, 10), round_mantissa(w, 10)) if x.shape[0] >= 512 else F.linear(x, w)

    assert classify_fp32_matmul(tf32_from_512_rows).precision_class == IEEE  # m=64 alone misses it
    res = classify_fp32_matmul_sizes(tf32_from_512_rows)
    assert res.precision_class == TF32 and res.by_m == {16: IEEE, 64: IEEE, 1024: TF32}
