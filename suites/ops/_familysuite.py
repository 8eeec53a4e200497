"""Shared plumbing of the newer per-op suites (fused norms, quantized GEMMs, LoRA, the scan).

Params over the registry (device x implementation x variant x oracle, CUDA ones marked ``gpu``),
the expectation, the row packing of tuple outputs, and the per-device sizes. No comparison logic:
the ``invariance`` fixture runs the oracles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest
from pytest_invariance.oracles.vocabulary import OP_ORACLES

from ._expect import expect_for

INTERPRET_SIZES = (1, 2, 3, 5)  # the Triton interpreter: a few rows only


def is_interpreted(device: str, name: str) -> bool:
    return device == "cpu" and name.endswith("triton")


def kernels_of(group: str, family: str, device: str) -> list:
    from pytest_invariance.reference_kernels.catalogue import register_builtin
    from pytest_invariance.reference_kernels.registry import kernels

    register_builtin(group)
    return kernels(family, device)


def kernel_named(group: str, family: str, device: str, name: str):
    return next(k for k in kernels_of(group, family, device) if k.name == name)


def params(
    group: str, family: str, variants: Callable[[str, Any], Iterable[tuple[str, str, dict]]],
    oracles: Iterable[str] = OP_ORACLES,
) -> list:  # fmt: skip
    """pytest params ``(device, name, variant, shape, oracle)``; ``variants(device, kernel)`` yields
    ``(variant, quantization, shape)`` with ``shape["label"]`` naming the shape in the id."""
    out = []
    for device in ("cpu", "cuda"):
        marks = [pytest.mark.gpu] if device == "cuda" else []
        for k in kernels_of(group, family, device):
            for variant, quant, shape in variants(device, k):
                for oracle in oracles:
                    out.append(pytest.param(
                        device, k.name, variant, shape, oracle, marks=[*marks, pytest.mark.quant(quant)],
                        id=f"{device}-{k.name}-{shape['label']}-{variant}-{oracle}",
                    ))  # fmt: skip
    return out


def expect_of(kernel, oracle: str) -> str:
    return expect_for(kernel.role, kernel.expect, oracle, kernel.oracle_expect)


def record_shape(shape: dict) -> dict:
    return {k: v for k, v in shape.items() if k != "label"}


def bits_row(*parts):
    """Tensors with one row per token packed into one int64 row each: floats by their bit pattern
    (fp32 as int32, bf16/fp16 as int16, e4m3 as uint8), so the oracles compare bits and a
    difference reads in ULPs of each part's own format."""
    import torch

    views = {4: torch.int32, 2: torch.int16, 1: torch.uint8}
    out = []
    for p in parts:
        p = p.reshape(p.shape[0], -1)
        if p.is_floating_point():
            p = p.contiguous().view(views[p.element_size()])
        out.append(p.to(torch.int64))
    return torch.cat(out, dim=1)


def sizes(invariance, device: str, name: str, cpu: tuple[int, ...], edges: tuple[int, ...] = ()) -> list[int]:
    """Batch sizes: a few under the interpreter, ``cpu`` on CPU, the profile's sweep plus ``edges`` on CUDA."""
    if is_interpreted(device, name):
        return list(INTERPRET_SIZES)
    if device == "cpu":
        return sorted(set(cpu))
    return sorted(set(invariance.batch_sizes()) | set(edges))


def trials(invariance, device: str, name: str, cpu: int = 2) -> int:
    if is_interpreted(device, name):
        return 1
    return min(invariance.trials, cpu) if device == "cpu" else invariance.trials
