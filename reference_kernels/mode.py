"""The mode switch: route aten ops to the reference kernels while it is on.

``enable()`` is a context manager and a decorator. While at least one
``enable`` is active, ``aten::mm``, ``aten::addmm``, ``aten::bmm``,
``aten::_log_softmax``, ``aten::mean.dim``, ``aten::rms_norm``,
``aten::scaled_dot_product_attention`` and torch's int4 weight-only GEMMs
(``aten::_weight_int4pack_mm`` on CUDA, ``aten::_weight_int4pack_mm_for_cpu``) dispatch to the reference kernels for CPU
and CUDA tensors, so stock code (``F.linear``, ``torch.mm``, ``F.rms_norm``,
``x.pow(2).mean(-1)``, ``log_softmax``, ``F.scaled_dot_product_attention``)
becomes batch-invariant without edits. SDPA cases the reference does not cover
(``attention.sdpa``: dropout, non-prefix masks, additive biases) run stock.
On CPU the element-wise transcendental ops of ``lanewise.LANEWISE_OPS`` (``silu``,
``sigmoid``, ``exp``, ``rsqrt``, ``cos``, ...) run with every element on ATen's SIMD
path, where the scalar tail loop would round some differently depending on the
tensor's size. Not routed at all: ``softmax`` (``aten::_softmax``) and direct
calls of the flash / efficient / cuDNN SDPA ops; the op census lists them per model.

How: a ``torch.library.Library("aten", "IMPL")`` registers our kernels on the
``CPU`` and ``CUDA`` dispatch keys, replacing the stock ones; destroying the
library restores them. ``rms_norm`` and ``scaled_dot_product_attention`` are
CompositeImplicitAutograd in torch 2.11-2.13 (the math kernel fills every
backend slot), and a direct ``CPU`` / ``CUDA`` kernel takes precedence over
it, while its autograd slot falls through to the backend: so the override
catches ``F.rms_norm`` and ``F.scaled_dot_product_attention`` before they
decompose into the flash / efficient / cuDNN kernels. The
registration is global to the process (the dispatcher has no per-thread
table); a depth counter makes nesting work: only the outermost exit restores
the stock kernels, and it does so even when the body raised.

Where the reference kernels do not apply (integer or complex dtypes, meta
tensors) and inside a reference kernel (which may itself call aten ops), the
call goes to the stock kernel captured before the override. Autograd through
the overridden ``rms_norm`` is not provided: the mode is for inference.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch

from .lanewise import LANEWISE_OPS

# aten op (with overload) -> name of our implementation below
ROUTED_OPS: tuple[str, ...] = (
    "mm", "addmm", "bmm", "_log_softmax", "mean.dim", "rms_norm", "scaled_dot_product_attention",
    "_weight_int4pack_mm", "_weight_int4pack_mm_for_cpu",
)  # fmt: skip
DISPATCH_KEYS: tuple[str, ...] = ("CPU", "CUDA")
# Ops with a kernel on one backend only (torch's int4 weight-only GEMMs).
OP_KEYS: dict[str, tuple[str, ...]] = {"_weight_int4pack_mm": ("CUDA",), "_weight_int4pack_mm_for_cpu": ("CPU",)}
CPU_ONLY_OPS: tuple[str, ...] = tuple(LANEWISE_OPS)  # routed on CPU only (see lanewise)
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)

_lock = threading.RLock()
_depth = 0
_lib: Any = None
_tls = threading.local()


def depth() -> int:
    """How many ``enable`` blocks are active (0 = stock kernels)."""
    return _depth


def is_enabled() -> bool:
    """Whether aten ops are routed to the reference kernels right now."""
    return _depth > 0


def _floats(*ts: torch.Tensor | None) -> bool:
    return all(t is None or (t.dtype in _FLOATS and t.device.type in ("cpu", "cuda")) for t in ts)


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor | None:
    if not _floats(a, b) or a.dtype != b.dtype:
        return None
    from .matmul import mm

    return mm(a, b)


def _addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: Any = 1, alpha: Any = 1):
    if not _floats(bias, a, b) or a.dtype != b.dtype:
        return None
    from .matmul import addmm

    return addmm(bias, a, b, beta=beta, alpha=alpha)


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor | None:
    if not _floats(a, b) or a.dtype != b.dtype:
        return None
    from .matmul import bmm

    return bmm(a, b)


def _log_softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor | None:
    if not _floats(x):
        return None
    from .rowops import log_softmax

    return log_softmax(x, dim, dtype=torch.float32 if half_to_float else None)


def _mean_dim(x: torch.Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None):
    out_dtype = dtype or x.dtype
    if not _floats(x) or out_dtype not in _FLOATS:
        return None
    from .rowops import mean

    return mean(x, dim, keepdim, dtype=dtype)


def _rms_norm(x: torch.Tensor, normalized_shape: Any, weight: torch.Tensor | None = None, eps: Any = None):
    if not _floats(x, weight):
        return None
    from .rowops import rms_norm

    k = len(normalized_shape)
    lead = x.shape[: x.dim() - k]
    rows = x.reshape(*lead, -1)
    w = None if weight is None else weight.reshape(-1).to(x.dtype)
    return rms_norm(rows, w, eps).reshape(x.shape)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Any = None, dropout_p: float = 0.0,
          is_causal: bool = False, *, scale: Any = None, enable_gqa: bool = False) -> torch.Tensor | None:  # fmt: skip
    if not _floats(q, k, v) or not (q.dtype == k.dtype == v.dtype):
        return None
    from .attention.sdpa import sdpa

    return sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)


def _int4pack_mm(x: torch.Tensor, packed: torch.Tensor, group: int, scales_and_zeros: torch.Tensor):
    """torch's int4 weight-only GEMM as the ``int4-gemm`` reference does it: the weight dequantized
    (once per weight, by torch's own kernel on an identity) to x's dtype, then the reference matmul."""
    if not _floats(x) or x.dim() != 2:
        return None
    from .int4 import int4pack_dequantized
    from .matmul import mm

    return mm(x, int4pack_dequantized(packed, group, scales_and_zeros, x.dtype, x.shape[1]))


_IMPLS: dict[str, Callable[..., torch.Tensor | None]] = {
    "mm": _mm,
    "addmm": _addmm,
    "bmm": _bmm,
    "_log_softmax": _log_softmax,
    "mean.dim": _mean_dim,
    "rms_norm": _rms_norm,
    "scaled_dot_product_attention": _sdpa,
    "_weight_int4pack_mm": _int4pack_mm,
    "_weight_int4pack_mm_for_cpu": _int4pack_mm,
}


def _lanewise(op: str) -> Callable[..., torch.Tensor | None]:
    def impl(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor | None:
        from .lanewise import lanewise

        return None if args else lanewise(op, x, **kwargs)

    return impl


_IMPLS.update({op: _lanewise(op) for op in CPU_ONLY_OPS})


def declined() -> bool:
    """Whether the last routed op called on this thread ran the stock kernel after all (the
    reference does not cover that call: integer dtypes, an SDPA mask it does not take): the
    launch census reads it to tell a reference call from a declined one."""
    return getattr(_tls, "declined", False)


def _routed(op: str, key: str) -> Callable[..., torch.Tensor]:
    """Our kernel for ``op`` on ``key``: the reference impl, or the stock kernel where it does not apply."""
    stock = torch.library.get_kernel(f"aten::{op}", key)
    impl = _IMPLS[op]

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not getattr(_tls, "inside", False):
            _tls.inside = True
            try:
                out = impl(*args, **kwargs)
            finally:
                _tls.inside = False
            _tls.declined = out is None
            if out is not None:
                return out
        return stock.call_boxed(keyset, *args, **kwargs)

    return kernel


def _install() -> Any:
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        # "Overriding a previously registered kernel": that is the point.
        warnings.simplefilter("ignore")
        for op in ROUTED_OPS:
            for key in OP_KEYS.get(op, DISPATCH_KEYS):
                try:
                    kernel = _routed(op, key)
                except RuntimeError:  # this build has no stock kernel there (a CPU-only torch and CUDA ops)
                    continue
                lib.impl(op, kernel, key, with_keyset=True)
        for op in CPU_ONLY_OPS:
            lib.impl(op, _routed(op, "CPU"), "CPU", with_keyset=True)
    return lib


def _push() -> None:
    global _depth, _lib
    with _lock:
        if _depth == 0:
            _lib = _install()
        _depth += 1


def _pop() -> None:
    global _depth, _lib
    with _lock:
        _depth -= 1
        if _depth == 0 and _lib is not None:
            lib, _lib = _lib, None
            lib._destroy()


class _Enable(contextlib.ContextDecorator):
    """Context manager and decorator returned by ``enable()``."""

    def __enter__(self) -> _Enable:
        _push()
        return self

    def __exit__(self, *exc: object) -> None:
        _pop()


def enable(fn: Callable | None = None) -> Any:
    """Route matmul, log-softmax, mean and RMSNorm aten ops to the reference kernels.

    ``with enable(): ...``, ``@enable()`` or ``@enable``. Nesting is allowed;
    the stock kernels come back when the outermost block exits, normally or
    by an exception.
    """
    if fn is None:
        return _Enable()
    if not callable(fn):
        raise TypeError(f"enable() takes a function to decorate or nothing, got {type(fn).__name__}")

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _Enable():
            return fn(*args, **kwargs)

    return wrapper
