"""Shared plumbing of the GEMM suites (``test_matmul``, ``test_fp8``): layer shapes, params, inputs.

No comparison logic lives here: the ``invariance`` fixture runs the oracles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest
from pytest_invariance.oracles.vocabulary import OP_ORACLES as ORACLES

# layer -> (K, N): x[M, K] @ w[N, K].T
LLAMA3_8B = {
    "qkv": (4096, 6144),
    "o": (4096, 4096),
    "gate_up": (4096, 28672),
    "down": (14336, 4096),
    "lm_head": (4096, 128256),
}
QWEN2_05B = {
    "qkv": (896, 1152),
    "o": (896, 896),
    "gate_up": (896, 9728),
    "down": (4864, 896),
    "lm_head": (896, 151936),
}
INTERPRET_SHAPE = ("tiny", "tiny", 64, 48)  # the Triton interpreter: tiny shapes only
CPU_BATCH_LIMIT = 33
INTERPRET_LIMIT = 17

Shape = tuple[str, str, int, int]  # (model, layer, K, N)


def shapes(
    device: str,
    name: str,
    models: dict[str, dict[str, tuple[int, int]]],
    cpu_layers: Iterable[tuple[str, str]],
) -> list[Shape]:
    """The tiny shape under the interpreter, ``cpu_layers`` on CPU, every layer of ``models`` on CUDA."""
    if name.endswith("triton") and device == "cpu":
        return [INTERPRET_SHAPE]
    if device == "cpu":
        return [(m, layer, *models[m][layer]) for m, layer in cpu_layers]
    return [(m, layer, k, n) for m, layers in models.items() for layer, (k, n) in layers.items()]


def gemm_params(family: str, variants: Callable[[str, Any], Iterable[tuple[Any, str, Shape]]]) -> list:
    """pytest params (device, kernel name, variant, shape, oracle) over the registry; CUDA ones marked gpu.

    ``variants(device, kernel)`` yields ``(variant, quantization label, shape)`` in the order the
    params should run; the variant (a dtype name, a quantization) is the test's third argument.
    """
    from pytest_invariance.reference_kernels.catalogue import register_builtin
    from pytest_invariance.reference_kernels.registry import kernels

    register_builtin("gemm")
    out = []
    for device in ("cpu", "cuda"):
        marks = [pytest.mark.gpu] if device == "cuda" else []
        for k in kernels(family, device):
            for variant, quant, (model, layer, kk, n) in variants(device, k):
                for oracle in ORACLES:
                    out.append(
                        pytest.param(
                            device,
                            k.name,
                            variant,
                            (model, layer, kk, n),
                            oracle,
                            marks=[*marks, pytest.mark.quant(quant)],
                            id=f"{device}-{k.name}-{model}.{layer}-{quant}-{oracle}",
                        )
                    )
    return out


def wide(shape: tuple[int, ...], seed: int, device: str, dtype: Any = None):
    """``oracles.inputs.wide_spread`` on the device's own generator (big weights never touch the CPU).

    ``dtype`` defaults to fp32.
    """
    import torch

    dtype = torch.float32 if dtype is None else dtype
    if device == "cpu":
        from pytest_invariance.oracles.inputs import wide_spread

        return wide_spread(shape, seed, dtype)
    g = torch.Generator(device=device).manual_seed(int(seed))
    base = torch.randn(shape, generator=g, dtype=torch.float32, device=device)
    expo = (torch.rand(shape, generator=g, dtype=torch.float32, device=device) * 2 - 1) * 4.0
    return (base * torch.exp2(expo)).to(dtype)


def limit(device: str, name: str) -> int | None:
    """Rows swept: 33 on CPU, 17 under the interpreter, the profile's sweep on CUDA."""
    if device == "cpu":
        return INTERPRET_LIMIT if name.endswith("triton") else CPU_BATCH_LIMIT
    return None
