"""Reference matmul entry points: ``linear``, ``mm``, ``addmm``, ``bmm``.

On CUDA they run the Triton kernel of ``matmul_triton`` (fixed tiles, no
split-K). On CPU they run the tiled BLAS path of ``matmul_cpu`` (fast enough
for the bundled engine), or, with ``backend="interpret"``, the same Triton
kernel under Triton's interpreter (slow: tiny shapes in tests only). The
``backend`` words are the same in every family (``device.resolve``). Signatures follow aten so the mode switch
can route ``aten::mm`` / ``addmm`` / ``bmm`` here unchanged.

``catalogue`` registers the stock, reference and mutant implementations of
the ``matmul`` and ``fp8-gemm`` families.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import matmul_cpu
from .device import resolve


def _use_triton(t: torch.Tensor, backend: str) -> bool:
    return resolve(t, backend, torch_on_cuda=False) != "torch"


def mm(a: torch.Tensor, b: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """``a[M, K] @ b[K, N]`` (aten::mm)."""
    if _use_triton(a, backend):
        from .matmul_triton import bmm_triton

        return bmm_triton(a.unsqueeze(0), b.unsqueeze(0))[0]
    return matmul_cpu.mm_tiled(a, b)


def addmm(
    bias: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    beta: float = 1,
    alpha: float = 1,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """``beta * bias + alpha * (a @ b)`` (aten::addmm); bias broadcastable to [M, N]."""
    if _use_triton(a, backend):
        from .matmul_triton import bmm_triton

        bias3 = bias.expand(a.shape[0], b.shape[1]).unsqueeze(0)
        return bmm_triton(a.unsqueeze(0), b.unsqueeze(0), bias3, alpha=alpha, beta=beta)[0]
    if alpha == 1 and beta == 1:
        return matmul_cpu.mm_tiled(a, b, bias)
    # Unusual scalars: scale outside the product, element-wise (still per row).
    prod = matmul_cpu.mm_tiled(a, b).float() * alpha
    return (prod + beta * bias.float()).to(a.dtype)


def bmm(a: torch.Tensor, b: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """``a[B, M, K] @ b[B, K, N]`` (aten::bmm)."""
    if _use_triton(a, backend):
        from .matmul_triton import bmm_triton

        return bmm_triton(a, b)
    return matmul_cpu.bmm_tiled(a, b)


def linear(
    x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, *, backend: str = "auto"
) -> torch.Tensor:
    """``x[..., K] @ w[N, K].T (+ bias[N])``: the ``matmul`` family's call signature (without bias)."""
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    if bias is None:
        out = mm(x2, w.t(), backend=backend)
    else:
        out = addmm(bias, x2, w.t(), backend=backend)
    return out.reshape(*lead, w.shape[0])


def linear_interpret(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The Triton kernel under the interpreter, on CPU tensors (tests on tiny shapes)."""
    return linear(x, w, backend="interpret")


def stock_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """Stock path: ``F.linear`` (cuBLAS on CUDA, oneDNN/MKL on CPU)."""
    return F.linear(x, w, b)
