"""``enable()`` runs CPU transcendental ops with every element on the SIMD path (``lanewise``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from pytest_invariance.oracles.batch import batch_size_oracle
from pytest_invariance.oracles.inputs import wide_spread
from pytest_invariance.reference_kernels import enable
from pytest_invariance.reference_kernels.lanewise import LANEWISE_OPS, lanewise
from pytest_invariance.reference_kernels.mode import CPU_ONLY_OPS

SIZES = [1, 2, 3, 5, 7, 9, 16, 17, 33]
ROW = 23  # odd: a batch of n rows leaves a different tail for every n


def _tail_mutant(x: torch.Tensor) -> torch.Tensor:
    """The positive control: silu whose last ``numel % 16`` elements are one ulp off, as a scalar
    tail loop that rounds differently would make them."""
    flat = F.silu(x).reshape(-1).clone()
    tail = flat.numel() % 16
    if tail:
        flat[-tail:] = torch.nextafter(flat[-tail:], torch.full_like(flat[-tail:], float("inf")))
    return flat.reshape(x.shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", ["silu", "sigmoid", "rsqrt", "exp", "cos"])
def test_routed_op_gives_each_row_the_same_bits_whatever_shares_its_tensor(op: str, dtype: torch.dtype) -> None:
    pool = wide_spread((max(SIZES), ROW), 0, dtype).abs() + 0.5  # rsqrt and exp stay finite
    f = getattr(torch.ops.aten, op)
    with enable():
        routed = batch_size_oracle(f, pool, SIZES)
    control = batch_size_oracle(_tail_mutant, pool, SIZES)
    assert not routed.diverged, routed.evidence()
    assert control.diverged  # the oracle sees a tail that rounds differently
    with enable():
        assert torch.equal(f(pool), lanewise(op, pool))  # really the lanewise path


def test_the_mode_routes_every_lanewise_op_and_leaves_other_devices_and_dtypes_alone() -> None:
    assert set(CPU_ONLY_OPS) == set(LANEWISE_OPS)
    assert lanewise("silu", torch.ones(3, dtype=torch.float64)) is None
    assert lanewise("silu", torch.ones(0)) is None
    x = wide_spread((4, 40), 1, torch.float32)
    stock = F.gelu(x, approximate="tanh")
    with enable():
        routed = F.gelu(x, approximate="tanh")  # a keyword argument reaches the out= kernel
        torch.testing.assert_close(torch.exp(x), torch.exp(x.double()).float(), rtol=1e-6, atol=0)
    torch.testing.assert_close(routed, stock)
