"""An element-wise ``tl.dot`` for Triton's interpreter, so CPU tests measure the kernel, not numpy.

Why: the interpreter computes ``tl.dot`` as one ``np.matmul`` over the whole tile, and numpy's BLAS
(OpenBLAS, MKL) blocks that product by the tile's rows. A row's bits then depend on where it sits
in the tile and on the host's BLAS, not on the kernel (an fp32 tile row at position 10 differed
from the same row alone by 16384 ULP on an AMD EPYC). No claim about the kernel follows from that.

What replaces it: each output element is the sum over k of exact float64 products of its own
A-row and B-column, added in k order, rounded once to the accumulator dtype and added to the
accumulator. That makes ``tl.dot`` a function of one row and one column only, on every host, so a
row-dependence seen under the interpreter is the kernel's own (its tiling, masks, K order or a
cross-row reduction). It says nothing about the GPU's MMA rounding: the GPU suites measure that.

Installed by the Triton kernel modules when they are imported for the interpreter; the compiled
GPU path never calls the interpreter's builder, so nothing changes there.
"""

from __future__ import annotations

from typing import Any

_INSTALLED = False


def _as_float64(handle: Any, np: Any, tl: Any) -> Any:
    """A float tile as float64 values (the interpreter stores bf16 as uint16 bit patterns)."""
    data = handle.data
    if handle.dtype.scalar == tl.bfloat16 or (data.dtype == np.uint16 and handle.dtype.is_floating()):
        return (data.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return data.astype(np.float64)


def _elementwise_dot(original: Any) -> Any:
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def create_dot(
        self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any
    ) -> Any:
        fp8 = any(h.dtype.primitive_bitwidth == 8 and h.dtype.is_floating() for h in (a, b))
        if fp8 or not (a.dtype.is_floating() and b.dtype.is_floating()):
            # Integer dots are exact (row-independent) already; fp8 keeps upstream's conversion.
            if not fp8:
                return original(self, a, b, d, input_precision, max_num_imprecise_acc)
            from triton.runtime.interpreter import _convert_float

            a = TensorHandle(_convert_float(a.data, a.dtype, tl.float16, None).view(np.float16), tl.float16)
            b = TensorHandle(_convert_float(b.data, b.dtype, tl.float16, None).view(np.float16), tl.float16)
        av, bv = _as_float64(a, np, tl), _as_float64(b, np, tl)
        acc = np.zeros(av.shape[:-1] + (bv.shape[-1],), dtype=np.float64)
        for k in range(av.shape[-1]):
            acc += av[..., :, k : k + 1] * bv[..., k : k + 1, :]
        out_dtype = d.data.dtype
        return TensorHandle((acc.astype(out_dtype) + d.data).astype(out_dtype), d.dtype.scalar)

    create_dot.__wrapped__ = original  # type: ignore[attr-defined]
    return create_dot


def install() -> None:
    """Replace the interpreter's ``create_dot`` (idempotent; a no-op where triton has no interpreter)."""
    global _INSTALLED
    if _INSTALLED:
        return
    try:
        from triton.runtime.interpreter import InterpreterBuilder
    except ImportError:  # pragma: no cover - triton without its interpreter
        return
    InterpreterBuilder.create_dot = _elementwise_dot(InterpreterBuilder.create_dot)
    _INSTALLED = True


def installed() -> bool:
    return _INSTALLED
