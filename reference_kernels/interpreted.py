"""A Triton kernel for a device: compiled on CUDA, the same Python body under Triton's interpreter on CPU.

Why: the GEMM kernels run on CPU tensors in a process that imported triton for the GPU (no
``TRITON_INTERPRET=1``), so the caller wraps the kernel's body in ``InterpretedFunction`` itself.
Such a wrapper would still see the kernel's ``@triton.jit`` helpers as compiled-only functions
("Cannot call @triton.jit'd outside of the scope of a kernel"); the body here runs with the
helpers it names interpreted too, so a kernel and its helpers are one source on both paths.
"""

from __future__ import annotations

import types
from typing import Any

import torch

_interpreted: dict = {}


def kernel_for(kernel: Any, device: torch.device) -> tuple[Any, bool]:
    """``(kernel to launch, interpreted)``: the kernel itself on CUDA, else its interpreted form."""
    if device.type == "cuda":
        return kernel, False
    return interpreted(kernel), True


def interpreted(kernel: Any) -> Any:
    """``kernel`` under the interpreter, its ``@triton.jit`` helpers included (cached per kernel)."""
    from triton.runtime.interpreter import InterpretedFunction

    if isinstance(kernel, InterpretedFunction):  # TRITON_INTERPRET=1 at import: every jit is one
        return kernel
    got = _interpreted.get(kernel)
    if got is None:
        got = _interpreted[kernel] = InterpretedFunction(_with_interpreted_helpers(kernel.fn))
    return got


def _with_interpreted_helpers(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` over a copy of its globals in which the jit functions it names are interpreted."""
    from triton.runtime.jit import JITFunction

    helpers = {n: interpreted(fn.__globals__[n]) for n in fn.__code__.co_names
               if isinstance(fn.__globals__.get(n), JITFunction)}  # fmt: skip
    if not helpers:
        return fn
    scope = {**fn.__globals__, **helpers}
    body = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    body.__annotations__ = fn.__annotations__  # the interpreter reads constexpr parameters from them
    body.__kwdefaults__ = fn.__kwdefaults__
    return body
