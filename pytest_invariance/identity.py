"""Who measured a record: its hardware class (a matrix column) and its software stack.

Why classes, not names: the same CPU model string covers an AVX2-only and an AVX-512 part, and
stock CPU kernels are picked by the ISA torch dispatches to, so the column is the model plus that
ISA (plus AMX where present); a GPU's column is its name plus compute capability. Why stacks: an
upgrade (torch, triton, CUDA, cuBLAS, cuDNN, NCCL, the driver, the engine) may change a verdict,
so "the latest run wins" only within one stack, and a cell whose stacks disagree says so.

Pure functions over a record's ``hardware`` and ``software`` objects; a field an older record
lacks is unknown (``None``), never guessed. No torch here: the fingerprint is ``hardware.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Filled in as None (unknown) on records written before these fields existed.
HARDWARE_FIELDS = ("isa", "amx")
GPU_FIELDS = ("gpu_index", "gpu_uuid", "sm_count", "memory_gib")
SOFTWARE_FIELDS = ("cublas", "cudnn", "nccl", "engine")

# (label, section, field): the versions that make a stack, in the order a stack label shows them.
STACK_FIELDS = (
    ("torch", "software", "torch"),
    ("triton", "software", "triton"),
    ("CUDA", "hardware", "cuda"),
    ("driver", "hardware", "driver"),
    ("cuBLAS", "software", "cublas"),
    ("cuDNN", "software", "cudnn"),
    ("NCCL", "software", "nccl"),
)


def fill_unknown(hardware: dict, software: dict) -> None:
    """Give an older record's hardware and software the identity fields it lacks, as None."""
    for key in HARDWARE_FIELDS if hardware.get("kind") != "cuda" else (*HARDWARE_FIELDS, *GPU_FIELDS):
        hardware.setdefault(key, None)
    for key in SOFTWARE_FIELDS:
        software.setdefault(key, None)


def hardware_class(hardware: Mapping[str, Any]) -> str:
    """The matrix column: ``NVIDIA H200 · cc 9.0``, ``Intel(R) Xeon(R) Processor · AVX512``,
    ``... · AVX512 AMX``; the bare name where the ISA or capability is unknown (older records)."""
    name = str(hardware.get("name") or "unknown hardware")
    if hardware.get("kind") == "cuda":
        cc = hardware.get("compute_capability")
        return f"{name} · cc {cc}" if cc else name
    isa = hardware.get("isa")
    if not isa:
        return name
    return f"{name} · {isa}" + (" AMX" if hardware.get("amx") else "")


def engine_text(engine: Any) -> str | None:
    """``vllm 0.11.0 (Qwen/Qwen3-0.6B)`` from ``software.engine`` (None: not an e2e record)."""
    if not isinstance(engine, Mapping):
        return None if engine in (None, "") else str(engine)
    name = engine.get("name") or "engine"
    text = f"{name} {engine['version']}" if engine.get("version") else str(name)
    return f"{text} ({engine['model']})" if engine.get("model") else text


def stack_of(hardware: Mapping[str, Any], software: Mapping[str, Any]) -> tuple:
    """The software stack a record ran on, as a hashable key (None for each unknown part)."""
    sections = {"hardware": hardware, "software": software}
    parts = tuple(_text(sections[section].get(field)) for _, section, field in STACK_FIELDS)
    return (*parts, engine_text(software.get("engine")))


def stack_label(stack: tuple) -> str:
    """``torch 2.11.0+cu130 · triton 3.6.0 · CUDA 13.0 · driver 580.159.04``: the known parts."""
    parts = [f"{label} {value}" for (label, _, _), value in zip(STACK_FIELDS, stack, strict=False) if value]
    if len(stack) > len(STACK_FIELDS) and stack[len(STACK_FIELDS)]:
        parts.append(f"engine {stack[len(STACK_FIELDS)]}")
    return " · ".join(parts) or "unknown stack"


def _text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)
