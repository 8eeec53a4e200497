"""RMSNorm: is a row's normalised output independent of the batch it rides in?

Every ``rmsnorm`` implementation in the registry (stock ``F.rms_norm``, the
reference kernel, the split-reduction mutant, and any kernel registered for
the family: ``fn(x[M, H], weight[H], eps) -> [M, H]``) x bf16/fp16/fp32 x
hidden sizes of real models x oracles batch-size, batch-position, run-to-run.
Stock rows are measured, the reference must be ``invariant``, mutants
``divergent``. The control is ``mutant:rmsnorm-split`` (batch-dependent
split) for the batch oracles and the same mutant with a per-call split count
for run-to-run.
"""

from __future__ import annotations

import pytest

from ._rowsuite import (
    INTERPRET_WIDTH,
    QUANT,
    batch_limit,
    device_params,
    expect_for,
    pool_inputs,
    trials_for,
)

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.family("rmsnorm")

EPS = 1e-5
# Hidden sizes: Llama-3-8B (4096) and a small model (Qwen2-0.5B, 896); CPU keeps them too (cheap).
MODELS = {
    "cuda": (("llama3-8b", 4096), ("qwen2-0.5b", 896)),
    "cpu": (("llama3-8b", 4096), ("qwen2-0.5b", 896)),
}


def _shapes(device: str, name: str) -> list[dict]:
    if device == "cpu" and name.endswith("triton"):
        return [{"label": f"H{INTERPRET_WIDTH}", "H": INTERPRET_WIDTH, "model": "tiny"}]
    return [{"label": f"H{h}", "H": h, "model": m} for m, h in MODELS[device]]


@pytest.mark.parametrize(
    ("device", "name", "dtype_name", "shape", "oracle"), device_params("rmsnorm", _shapes)
)
def test_rmsnorm(invariance, device, name, dtype_name, shape, oracle):
    from pytest_invariance.oracles.inputs import wide_spread
    from pytest_invariance.reference_kernels.mutants.rmsnorm_split import per_call_splits, split_rmsnorm
    from pytest_invariance.reference_kernels.registry import kernels

    kernel = next(k for k in kernels("rmsnorm", device) if k.name == name)
    dtype = getattr(torch, dtype_name)
    h = shape["H"]
    weight = wide_spread((h,), 7, dtype, decades=1.0, device=device)
    limit = batch_limit(device, name, invariance.profile)
    rows = max(invariance.batch_sizes(limit))
    if oracle == "run-to-run":
        control, control_name = per_call_splits(split_rmsnorm), "mutant:rmsnorm-split-per-call"
    else:
        control, control_name = split_rmsnorm, "mutant:rmsnorm-split"
    invariance.check(
        lambda x: kernel.fn(x, weight, EPS),
        pool_inputs(rows, h, dtype_name, device),
        oracle=oracle,
        control=lambda x: control(x, weight, EPS),
        control_name=control_name,
        family="rmsnorm",
        implementation=name,
        quantization=QUANT[dtype_name],
        dtype=dtype,
        shape={k: v for k, v in shape.items() if k != "label"},
        expect=expect_for(kernel.role, kernel.expect, oracle, kernel.oracle_expect),
        limit=limit,
        trials=trials_for(invariance, dtype_name, name, device),
        extra={"op": "rms_norm", "eps": EPS, "device": device},
    )
