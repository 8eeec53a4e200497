"""One launch helper for the Triton kernels of the newer families (fused norms, quantized GEMMs,
LoRA, the linear-attention scan): a ``launch.Launcher`` per kernel, keyed by everything the JIT
specializes on, and a clear refusal where a CPU tensor meets a kernel built for the GPU.
"""

from __future__ import annotations

from typing import Any

import torch

from .device import interpreting
from .launch import Launcher, aligned

_launchers: dict = {}


def require_mode(t: torch.Tensor) -> None:
    """Refuse a CPU tensor unless triton runs its interpreter (``TRITON_INTERPRET=1`` before import)."""
    if not t.is_cuda and not interpreting():
        raise RuntimeError("this Triton kernel needs a CUDA tensor, or TRITON_INTERPRET=1 set before triton is imported")


def launch(kernel: Any, grid: tuple[int, ...], args: tuple, consts: dict, warps: int = 4, stages: int | None = None,
           *, fp_fusion: bool = True) -> None:
    """Run ``kernel[grid](*args, **consts)``; on CUDA through a plan keyed by every tensor's shape,
    strides, dtype and 16-byte alignment, every integer argument and every constexpr.
    ``fp_fusion=False`` compiles without FMA contraction (every mul and add rounded on its own)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if tensors:
        require_mode(tensors[0])
    key = None
    if tensors and tensors[0].is_cuda:
        key = (tensors[0].device.index, *((t.shape, t.stride(), t.dtype) for t in tensors), *aligned(*tensors),
               *(a for a in args if isinstance(a, (int, bool))), *sorted(consts.items()))  # fmt: skip
    got = _launchers.get(kernel)
    if got is None:
        got = _launchers[kernel] = Launcher(kernel)
    options = {"num_warps": warps} if stages is None else {"num_warps": warps, "num_stages": stages}
    if not fp_fusion:
        options["enable_fp_fusion"] = False
    if tensors and not tensors[0].is_cuda:
        options = {}
    got.launch(key, grid, args, consts, options)
