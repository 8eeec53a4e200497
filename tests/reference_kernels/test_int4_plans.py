"""The int4-gemm reference's plans (split K across programs or not, dequantize first or not) only
move work: every plan returns the same bits, for K that is and is not a whole number of pieces.
Under the Triton interpreter this proves the kernel's structure (the order of the adds), not the
GPU's MMA rounding; the GPU test below repeats it on CUDA."""

from __future__ import annotations

import pytest

from tests.interpreter_run import run_interpreted

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

PLANS = "[(False, False), (True, False), (False, True), (True, True)]"

SCRIPT = """
import torch
from pytest_invariance.oracles.inputs import rows_pool
from pytest_invariance.reference_kernels import int4
from pytest_invariance.reference_kernels.int4_triton import int4_mm_triton, splits
for k in (1024, 1152):  # 1 piece; 2 pieces, the second one group long
    qw = int4.quantize_int4(rows_pool(32, (k,), 3))
    x = rows_pool(5, (k,), 4, torch.bfloat16)
    outs = [int4_mm_triton(x, *qw, force=p) for p in PLANS]
    assert all(torch.equal(o.view(torch.int16), outs[0].view(torch.int16)) for o in outs), k
    ref = x.double() @ int4.dequantize(*qw).double()
    assert (outs[0].double() - ref).abs().max() <= 2**-6 * ref.abs().max(), k
    print(k, splits(k))
print("plans agree")
""".replace("PLANS", PLANS)


def test_int4_plans_give_the_same_bits_under_the_interpreter():
    out = run_interpreted(SCRIPT, "plans agree", timeout=300)
    assert "1152 2" in out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA needed")
@pytest.mark.parametrize("k", [4096, 1152])
def test_int4_plans_give_the_same_bits_on_cuda(k):
    from pytest_invariance.oracles.inputs import rows_pool
    from pytest_invariance.reference_kernels import int4
    from pytest_invariance.reference_kernels.int4_triton import int4_mm_triton

    qw = int4.quantize_int4(rows_pool(1024, (k,), 3, device="cuda"))
    x = rows_pool(130, (k,), 4, torch.bfloat16, "cuda")
    outs = [int4_mm_triton(x, *qw, force=p) for p in eval(PLANS)]
    for o in outs[1:]:
        assert torch.equal(o.view(torch.int16), outs[0].view(torch.int16))
    whole = int4_mm_triton(x, *qw)
    for m in (1, 3, 17, 64):
        assert torch.equal(int4_mm_triton(x[:m], *qw).view(torch.int16), whole[:m].view(torch.int16)), m
