"""FP8 GEMM: is a row's e4m3 GEMM output independent of the batch it rides in?

Every ``fp8-gemm`` implementation in the registry (stock ``torch._scaled_mm``,
the reference kernel, the dynamic-scale mutant, and any kernel registered for
the family: ``fn(x[M, K], w_fp8[N, K], w_scale) -> bf16[M, N]``, quantizing the
activation itself) x activation quantization x linear layers of Llama-3-8B and
Qwen2-0.5B x oracles batch-size, batch-position, run-to-run.

Stock and reference run both row-local activation quantizations:
``fp8-e4m3-token`` (a scale per row, ``x_scale=None``) and
``fp8-e4m3-tensor-static`` (one calibrated scale, passed as ``x_scale``). The
mutant is ``fp8-e4m3-tensor-dynamic`` (scale from the whole batch's amax) and
must be ``divergent``; a registered kernel runs once, under the quantization
named by its ``quantization`` attribute (default ``fp8-e4m3``). The control is
the dynamic-scale mutant for the batch oracles and a per-call split-K FP8 GEMM
for run-to-run. Where ``torch._scaled_mm`` is missing the stock row is recorded
``unsupported``.
"""

from __future__ import annotations

from functools import lru_cache

import pytest

from ._expect import expect_for
from ._gemmsuite import LLAMA3_8B, QWEN2_05B, gemm_params, limit, shapes, wide

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.family("fp8-gemm")

# Qwen2-0.5B without its lm_head in this suite.
MODELS = {"llama3-8b": LLAMA3_8B, "qwen2-0.5b": {k: v for k, v in QWEN2_05B.items() if k != "lm_head"}}
# CPU: e4m3 -> fp32 conversion of the weight dominates, so the small model only.
CPU_LAYERS = (("qwen2-0.5b", "o"),)
TOKEN, STATIC, DYNAMIC = "fp8-e4m3-token", "fp8-e4m3-tensor-static", "fp8-e4m3-tensor-dynamic"


def _quantizations(kernel) -> tuple[str, ...]:
    if kernel.role in ("stock", "reference"):
        return (TOKEN, STATIC)
    return (getattr(kernel.fn, "quantization", "fp8-e4m3"),)


def _variants(device: str, kernel) -> list:
    return [
        (quant, quant, shape)
        for shape in shapes(device, kernel.name, MODELS, CPU_LAYERS)
        for quant in _quantizations(kernel)
    ]


def _params() -> list:
    return gemm_params("fp8-gemm", _variants)


@lru_cache(maxsize=2)
def _weight(n: int, k: int, device: str):
    from pytest_invariance.reference_kernels.fp8 import quantize_weight

    return quantize_weight(wide((n, k), 7, device))


@lru_cache(maxsize=2)
def _static_scale(k: int, device: str):
    """Calibrated offline, from rows that are never in a tested batch."""
    from pytest_invariance.reference_kernels.fp8 import tensor_scale

    return tensor_scale(wide((256, k), 10_007, device))


@lru_cache(maxsize=4)
def _rows(rows: int, k: int, seed: int, device: str):
    return wide((rows, k), seed, device)


@pytest.mark.parametrize(("device", "name", "quant", "shape", "oracle"), _params())
def test_fp8_gemm(invariance, device, name, quant, shape, oracle):
    from pytest_invariance.reference_kernels.fp8 import scaled_mm_available
    from pytest_invariance.reference_kernels.mutants.fp8_dynamic_scale import (
        fp8_dynamic_scale_linear,
        fp8_splitk_per_call,
    )
    from pytest_invariance.reference_kernels.registry import kernels

    kernel = next(k for k in kernels("fp8-gemm", device) if k.name == name)
    model, layer, k, n = shape
    record_shape = {"K": k, "N": n, "layer": f"{model}.{layer}"}
    common = dict(family="fp8-gemm", implementation=name, quantization=quant, dtype=torch.bfloat16)
    if kernel.role == "stock" and not scaled_mm_available(device):
        invariance.record(
            **common,
            oracle=oracle,
            verdict="unsupported",
            shape=record_shape,
            extra={"reason": f"torch._scaled_mm unavailable on {device}"},
        )
        return
    wq, ws = _weight(n, k, device)
    xs = _static_scale(k, device) if quant == STATIC else None
    rows = max(invariance.batch_sizes(limit(device, name)))
    if oracle == "run-to-run":
        control, control_name = fp8_splitk_per_call(), "mutant:fp8-splitk-per-call"
    else:
        control, control_name = fp8_dynamic_scale_linear, "mutant:fp8-dynamic-scale"
    if kernel.role in ("stock", "reference"):
        fn = lambda x: kernel.fn(x, wq, ws, xs)  # noqa: E731
    else:
        fn = lambda x: kernel.fn(x, wq, ws)  # noqa: E731
    expect = expect_for(kernel.role, kernel.expect, oracle, kernel.oracle_expect)
    invariance.check(
        fn,
        lambda seed: _rows(
            rows, k, seed, device
        ).clone(),  # a kernel writing in place must not poison the cache
        oracle=oracle,
        control=lambda x: control(x, wq, ws, xs),
        control_name=control_name,
        **common,
        shape=record_shape,
        expect=expect,
        limit=limit(device, name),
    )
