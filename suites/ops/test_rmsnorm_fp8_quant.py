"""RMSNorm -> FP8: do a token's e4m3 values and scale depend on what else is in its batch?

Family ``rmsnorm-fp8-quant`` (``fn(x, weight, eps, scale=None) -> (q e4m3, scale)``): stock
torch, the reference, the batch-scale mutant and registered kernels x the three activation
scales: per-tensor static (``fp8-e4m3-tensor-static``, calibrated offline on rows never in a
tested batch), per-token dynamic (``fp8-e4m3-token``) and per-tensor dynamic
(``fp8-e4m3-tensor-dynamic``: one amax over the batch, what engines ship by mistake, vllm#57016;
stock ``torch-tensor-dynamic`` and the mutant) x batch-size, batch-position, run-to-run. The
output row is the e4m3 bytes then the row's scale bits (int64). Controls: the batch-scale mutant
(batch oracles) and a norm whose split count changes per call (run-to-run).
"""

from __future__ import annotations

from functools import lru_cache

import pytest

from ._familysuite import (
    bits_row,
    expect_of,
    is_interpreted,
    kernel_named,
    params,
    record_shape,
    sizes,
    trials,
)  # fmt: skip

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.family("rmsnorm-fp8-quant")

GROUP, FAMILY, EPS = "fused-norm", "rmsnorm-fp8-quant", 1e-6
STATIC, TOKEN, DYNAMIC = "fp8-e4m3-tensor-static", "fp8-e4m3-token", "fp8-e4m3-tensor-dynamic"
CPU_SIZES = (1, 2, 3, 8, 9, 33)
MODELS = {"cuda": (("llama3-8b", 4096), ("qwen2-0.5b", 896)), "cpu": (("qwen2-0.5b", 896),)}


def _quants(kernel) -> tuple[str, ...]:
    q = getattr(kernel.fn, "quantization", None)
    if q is not None:
        return (q,)
    return (STATIC, TOKEN)


def _variants(device: str, kernel):
    if is_interpreted(device, kernel.name):
        return [(q, q, {"label": "H64", "H": 64, "model": "tiny"}) for q in _quants(kernel)]
    return [(q, q, {"label": f"H{h}", "H": h, "model": m}) for m, h in MODELS[device] for q in _quants(kernel)]


@lru_cache(maxsize=4)
def _static_scale(h: int, device: str):
    """Calibrated offline: the per-tensor amax of the reference norm over rows never in a tested batch."""
    from pytest_invariance.oracles.inputs import rows_pool, wide_spread
    from pytest_invariance.reference_kernels.fused_norm import batch_scale
    from pytest_invariance.reference_kernels.rowops import rms_norm

    w = wide_spread((h,), 7, torch.bfloat16, decades=1.0, device=device)
    return batch_scale(rms_norm(rows_pool(256, (h,), 10_007, torch.bfloat16, device), w, EPS)).reshape(())


def as_rows(fn, weight, scale):
    def run(rows: torch.Tensor) -> torch.Tensor:
        q, s = fn(rows, weight, EPS, scale)
        return bits_row(q, s.reshape(-1, 1).expand(rows.shape[0], 1))

    return run


@pytest.mark.parametrize(("device", "name", "quant", "shape", "oracle"), params(GROUP, FAMILY, _variants))
def test_rmsnorm_fp8_quant(invariance, device, name, quant, shape, oracle):
    from pytest_invariance.oracles.inputs import rows_pool, wide_spread
    from pytest_invariance.reference_kernels.mutants.fused_norm_mutants import (
        rmsnorm_fp8_split_per_call,
        rmsnorm_fp8_tensor_dynamic,
    )  # fmt: skip

    kernel = kernel_named(GROUP, FAMILY, device, name)
    h = shape["H"]
    weight = wide_spread((h,), 7, torch.bfloat16, decades=1.0, device=device)
    scale = _static_scale(h, device) if quant == STATIC else None
    batch = sizes(invariance, device, name, CPU_SIZES)
    if oracle == "run-to-run":
        control, control_name = rmsnorm_fp8_split_per_call(), "mutant:rmsnorm-fp8-split-per-call"
    else:
        control, control_name = rmsnorm_fp8_tensor_dynamic, "mutant:rmsnorm-fp8-tensor-dynamic"
    invariance.check(
        as_rows(kernel.fn, weight, scale),
        lambda seed: rows_pool(max(batch), (h,), seed, torch.bfloat16, device),
        oracle=oracle, control=as_rows(control, weight, scale), control_name=control_name,
        family=FAMILY, implementation=name, quantization=quant, dtype=torch.bfloat16,
        shape=record_shape(shape), expect=expect_of(kernel, oracle), batch_sizes=batch,
        trials=trials(invariance, device, name),
        extra={"op": "rms_norm -> e4m3", "eps": EPS, "device": device, "row": "e4m3 bytes, then the scale's fp32 bits"},
    )  # fmt: skip
