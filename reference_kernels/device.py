"""Where a reference kernel runs, in one vocabulary, and the host helpers every family shares.

``backend=`` takes the same words in every family:

- ``"auto"`` (or None): Triton on CUDA tensors, the torch path on CPU tensors;
- ``"triton"``: the Triton kernel; on CPU tensors only under ``TRITON_INTERPRET=1`` (the
  interpreter), otherwise a clear error naming ``"interpret"``;
- ``"interpret"``: the Triton kernel under Triton's interpreter, CPU tensors only (tests);
- ``"torch"`` (``"cpu"`` is an alias): the family's torch path; families without one on CUDA
  (``matmul``, ``fp8-gemm``) refuse CUDA tensors.

``resolve`` turns those words into what runs: ``"triton"``, ``"interpret"`` or ``"torch"``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

BACKENDS = ("auto", "triton", "interpret", "torch")
ALIASES = {"cpu": "torch", None: "auto"}


def interpreting() -> bool:
    """Whether triton is (to be) imported for its interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def resolve(t: Any, backend: str | None, *, torch_on_cuda: bool = True) -> str:
    """``"triton"``, ``"interpret"`` or ``"torch"`` for tensor ``t`` and the caller's ``backend``."""
    b = ALIASES.get(backend, backend)
    if b not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)} ('cpu' = 'torch')")
    cuda = t.device.type == "cuda"
    if b == "auto":
        return "triton" if cuda else "torch"
    if b == "interpret":
        if cuda:
            raise ValueError("backend 'interpret' runs on CPU tensors only")
        return "interpret"
    if b == "triton":
        if cuda:
            return "triton"
        if interpreting():
            return "interpret"
        raise ValueError("backend 'triton' needs a CUDA tensor; use 'interpret' (or TRITON_INTERPRET=1) on CPU")
    if cuda and not torch_on_cuda:
        raise ValueError(f"backend {backend!r} needs CPU tensors (this family's torch path is CPU-only)")
    return "torch"


def cdiv(a: int, b: int) -> int:
    """Integer ceiling division on the host (``triton.cdiv`` is a JIT-wrapped helper, ~8 us per call)."""
    return -(-a // b)


def sm_count(device: Any) -> int:
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


# The installed library's words for "no kernel for this configuration here" (cuBLASLt's heuristic finding
# no algorithm: block-scaled F.scaled_mm on torch 2.11+cu130, H200). Narrow on purpose: any other error
# is a real failure and propagates.
LIBRARY_REFUSALS = ("CUBLAS_STATUS_NOT_SUPPORTED",)


def library_refusal(call: Callable[[], object]) -> str | None:
    """Run ``call()`` once; the one-line cause if the installed library refuses it, None when it runs."""
    try:
        call()
    except RuntimeError as exc:
        line = (str(exc).strip().splitlines() or [""])[0]
        if not any(word in line for word in LIBRARY_REFUSALS):
            raise
        return f"{type(exc).__name__}: {line}"
    return None
