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

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.family("fp8-gemm")

LLAMA3_8B = {
    "qkv": (4096, 6144),
    "o": (4096, 4096),
    "gate_up": (4096, 28672),
    "down": (14336, 4096),
    "lm_head": (4096, 128256),
}
QWEN2_05B = {"qkv": (896, 1152), "o": (896, 896), "gate_up": (896, 9728), "down": (4864, 896)}
MODELS = {"llama3-8b": LLAMA3_8B, "qwen2-0.5b": QWEN2_05B}
# CPU: e4m3 -> fp32 conversion of the weight dominates, so the small model only.
CPU_LAYERS = (("qwen2-0.5b", "o"),)
INTERPRET_SHAPE = ("tiny", "tiny", 64, 48)
CPU_BATCH_LIMIT = 33
INTERPRET_LIMIT = 17
ORACLES = ("batch-size", "batch-position", "run-to-run")
TOKEN, STATIC, DYNAMIC = "fp8-e4m3-token", "fp8-e4m3-tensor-static", "fp8-e4m3-tensor-dynamic"


def _shapes(device: str, name: str) -> list[tuple[str, str, int, int]]:
    if name.endswith("triton") and device == "cpu":
        return [INTERPRET_SHAPE]
    if device == "cpu":
        return [(m, layer, *MODELS[m][layer]) for m, layer in CPU_LAYERS]
    return [(m, layer, k, n) for m, layers in MODELS.items() for layer, (k, n) in layers.items()]


def _quantizations(kernel) -> tuple[str, ...]:
    if kernel.role in ("stock", "reference"):
        return (TOKEN, STATIC)
    return (getattr(kernel.fn, "quantization", "fp8-e4m3"),)


def _params() -> list:
    from pytest_invariance.reference_kernels.matmul import register_builtin_gemm
    from pytest_invariance.reference_kernels.registry import kernels

    register_builtin_gemm()
    out = []
    for device in ("cpu", "cuda"):
        marks = [pytest.mark.gpu] if device == "cuda" else []
        for k in kernels("fp8-gemm", device):
            for model, layer, kk, n in _shapes(device, k.name):
                for quant in _quantizations(k):
                    for oracle in ORACLES:
                        out.append(
                            pytest.param(
                                device,
                                k.name,
                                quant,
                                (model, layer, kk, n),
                                oracle,
                                marks=[*marks, pytest.mark.quant(quant)],
                                id=f"{device}-{k.name}-{model}.{layer}-{quant}-{oracle}",
                            )
                        )
    return out


def _wide(shape: tuple[int, ...], seed: int, device: str):
    """Order-sensitive fp32 values (``oracles.inputs.wide_spread``), drawn on the device itself."""
    if device == "cpu":
        from pytest_invariance.oracles.inputs import wide_spread

        return wide_spread(shape, seed)
    g = torch.Generator(device=device).manual_seed(int(seed))
    base = torch.randn(shape, generator=g, dtype=torch.float32, device=device)
    expo = (torch.rand(shape, generator=g, dtype=torch.float32, device=device) * 2 - 1) * 4.0
    return base * torch.exp2(expo)


@lru_cache(maxsize=2)
def _weight(n: int, k: int, device: str):
    from pytest_invariance.reference_kernels.fp8 import quantize_weight

    return quantize_weight(_wide((n, k), 7, device))


@lru_cache(maxsize=2)
def _static_scale(k: int, device: str):
    """Calibrated offline, from rows that are never in a tested batch."""
    from pytest_invariance.reference_kernels.fp8 import tensor_scale

    return tensor_scale(_wide((256, k), 10_007, device))


@lru_cache(maxsize=4)
def _rows(rows: int, k: int, seed: int, device: str):
    return _wide((rows, k), seed, device)


def _limit(device: str, name: str) -> int | None:
    if device == "cpu":
        return INTERPRET_LIMIT if name.endswith("triton") else CPU_BATCH_LIMIT
    return None


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
    rows = max(invariance.batch_sizes(_limit(device, name)))
    if oracle == "run-to-run":
        control, control_name = fp8_splitk_per_call(), "mutant:fp8-splitk-per-call"
    else:
        control, control_name = fp8_dynamic_scale_linear, "mutant:fp8-dynamic-scale"
    if kernel.role in ("stock", "reference"):
        fn = lambda x: kernel.fn(x, wq, ws, xs)  # noqa: E731
    else:
        fn = lambda x: kernel.fn(x, wq, ws)  # noqa: E731
    expect = "measure" if kernel.role == "mutant" and oracle == "run-to-run" else kernel.expect
    method = {"batch-size": invariance.batch, "batch-position": invariance.position}.get(
        oracle, invariance.run_to_run
    )
    method(
        fn,
        lambda seed: _rows(rows, k, seed, device),
        control=lambda x: control(x, wq, ws, xs),
        control_name=control_name,
        **common,
        shape=record_shape,
        expect=expect,
        limit=_limit(device, name),
    )
