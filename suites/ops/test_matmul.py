"""Matmul: is a row's ``x @ w.T`` independent of the batch it rides in?

Every ``matmul`` implementation in the registry (stock ``F.linear``, the
reference kernel, the split-K mutant, and any kernel registered for the family:
``fn(x[M, K], w[N, K]) -> [M, N]``) x bf16/fp16/fp32 x the linear layers of
Llama-3-8B and Qwen2-0.5B x oracles batch-size, batch-position, run-to-run.
Stock rows are measured (the test passes whatever the verdict), the reference
must be ``invariant``, mutants ``divergent``. The control is
``mutant:splitk-matmul`` on the same shape for the batch oracles and the same
mutant with a per-call split count for run-to-run.

fp32 records carry the arithmetic actually used (``extra.precision``, see
``reference_kernels.precision``); a kernel that runs TF32 is recorded under
quantization ``fp32-tf32`` and flagged with ``extra.tf32 = true``.

CPU (CI, 2 cores) runs the Llama o-projection (fp32) and Qwen2-0.5B's qkv
projection (fp32, bf16) up to 33 rows; that is where stock fp32
``F.linear`` on x86 shows ``{1} {2..15} {16..}``. CUDA runs every layer and
dtype, with the profile's sweep (to 2049 rows in ``full``).
"""

from __future__ import annotations

import os
from functools import lru_cache

import pytest
from pytest_invariance.oracles.vocabulary import QUANTIZATION_OF_DTYPE as QUANT

from ._expect import expect_for
from ._gemmsuite import LLAMA3_8B, QWEN2_05B, gemm_params, limit, shapes, wide

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.family("matmul")

MODELS = {"llama3-8b": LLAMA3_8B, "qwen2-0.5b": QWEN2_05B}
# CPU: fp32 keeps the Llama o-projection (where stock x86 F.linear splits {1} {2..15} {16..});
# bf16 on a CPU without AMX is slow, so the small model only.
CPU_LAYERS = {"float32": (("llama3-8b", "o"), ("qwen2-0.5b", "qkv")), "bfloat16": (("qwen2-0.5b", "qkv"),)}
DTYPES = {"cuda": ("bfloat16", "float16", "float32"), "cpu": ("float32", "bfloat16")}


def _dtypes(device: str, name: str) -> tuple[str, ...]:
    """Under the interpreter fp32 only: its bf16 dot is emulated in fp32 anyway, and at the tiny
    interpreter K the split-K control's fp32 partial sums of exact bf16 products do not diverge."""
    if device == "cpu" and name.endswith("triton"):
        return ("float32",)
    return DTYPES[device]


def _variants(device: str, kernel) -> list:
    return [
        (dtype, QUANT[dtype], shape)
        for dtype in _dtypes(device, kernel.name)
        for shape in shapes(device, kernel.name, MODELS, CPU_LAYERS[dtype] if device == "cpu" else ())
    ]


def _params() -> list:
    return gemm_params("matmul", _variants)


@lru_cache(maxsize=2)
def _weight(n: int, k: int, dtype_name: str, device: str):
    return wide((n, k), 7, device, getattr(torch, dtype_name))


@lru_cache(maxsize=4)
def _rows(rows: int, k: int, seed: int, dtype_name: str, device: str):
    return wide((rows, k), seed, device, getattr(torch, dtype_name))


@lru_cache(maxsize=16)
def _precision(device: str, name: str) -> dict:
    """The arithmetic an implementation uses for fp32 (cached per device and implementation)."""
    from pytest_invariance.reference_kernels.precision import classify_fp32_matmul, classify_fp32_matmul_sizes
    from pytest_invariance.reference_kernels.registry import kernels

    kernel = next(k for k in kernels("matmul", device) if k.name == name)
    small = name.endswith("triton") and device == "cpu"
    res = (
        classify_fp32_matmul(kernel.fn, device, m=16, n=16, k=64)
        if small
        else classify_fp32_matmul_sizes(kernel.fn, device)  # several M: a switch with size is caught
    )
    return {**res.to_dict(), "quantization": res.quantization, "tf32": res.is_tf32}


@pytest.mark.parametrize(("device", "name", "dtype_name", "shape", "oracle"), _params())
def test_matmul(invariance, device, name, dtype_name, shape, oracle):
    from pytest_invariance.reference_kernels.mutants.splitk_matmul import splitk_matmul, splitk_per_call
    from pytest_invariance.reference_kernels.registry import kernels

    kernel = next(k for k in kernels("matmul", device) if k.name == name)
    model, layer, k, n = shape
    dtype = getattr(torch, dtype_name)
    w = _weight(n, k, dtype_name, device)
    rows = max(invariance.batch_sizes(limit(device, name)))
    if oracle == "run-to-run":
        control, control_name = splitk_per_call(), "mutant:splitk-matmul-per-call"
    else:
        control, control_name = splitk_matmul, "mutant:splitk-matmul"
    quant, extra = QUANT[dtype_name], {}
    if dtype == torch.float32:
        prec = _precision(device, name)
        quant = prec["quantization"]
        extra = {"precision": prec, "tf32": prec["tf32"]}
    invariance.check(
        lambda x: kernel.fn(x, w),
        lambda seed: _rows(
            rows, k, seed, dtype_name, device
        ).clone(),  # in-place kernels must not poison the cache
        oracle=oracle,
        control=lambda x: control(x, w),
        control_name=control_name,
        family="matmul",
        implementation=name,
        quantization=quant,
        dtype=dtype,
        shape={"K": k, "N": n, "layer": f"{model}.{layer}"},
        expect=expect_for(kernel.role, kernel.expect, oracle, kernel.oracle_expect),
        limit=limit(device, name),
        extra=extra,
    )


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)], ids=["cpu", "cuda"])
def test_reference_fp32_is_ieee(device):
    """The reference fp32 matmul must never run TF32 (or bf16) silently."""
    from pytest_invariance.reference_kernels.matmul import linear
    from pytest_invariance.reference_kernels.precision import IEEE, classify_fp32_matmul

    res = classify_fp32_matmul(linear, device)
    assert res.precision_class == IEEE, f"reference fp32 matmul on {device} looks {res.to_dict()}"


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1")
def test_reference_triton_fp32_is_ieee_under_interpreter():
    from pytest_invariance.reference_kernels.matmul import linear_interpret
    from pytest_invariance.reference_kernels.precision import IEEE, classify_fp32_matmul

    res = classify_fp32_matmul(linear_interpret, "cpu", m=16, n=16, k=64)
    assert res.precision_class == IEEE, res.to_dict()
