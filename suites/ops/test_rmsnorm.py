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

from ._rowsuite import INTERPRET_WIDTH, check_row_op, device_params

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
    from pytest_invariance.reference_kernels.mutants.rmsnorm_split import split_rmsnorm

    h = shape["H"]
    weight = wide_spread((h,), 7, getattr(torch, dtype_name), decades=1.0, device=device)
    check_row_op(
        invariance, "rmsnorm", device, name, dtype_name, oracle, width=h,
        bind=lambda f: lambda x: f(x, weight, EPS), control_fn=split_rmsnorm, control_name="mutant:rmsnorm-split",
        record_family="rmsnorm", shape={k: v for k, v in shape.items() if k != "label"},
        extra={"op": "rms_norm", "eps": EPS, "device": device},
    )  # fmt: skip
