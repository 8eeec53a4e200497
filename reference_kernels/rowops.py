"""Batch-invariant row reductions: RMSNorm, log-softmax and mean over the last dim.

Three backends compute the same thing, each with a reduction order that
depends on the row length only:

- ``triton`` on CUDA: one program per row, fixed chunk order (``_rowops_triton``);
- ``interpret``: the same Triton kernels under the Triton interpreter, for CPU
  tests on tiny shapes (slow);
- ``torch`` on CPU, the fast path of the bundled engine's invariant mode: the
  row is zero-padded to a power of two and summed by pairwise halving
  (``v[:, :w/2] + v[:, w/2:]`` until one column is left). Every step is an
  elementwise add over the whole batch, and an IEEE add gives the same bits
  whether it runs in a SIMD lane, a scalar tail or another thread, so no row
  can see its neighbours. torch's own CPU reductions split work across threads
  by the batch's size, which is exactly what this avoids. The oracles confirm
  it on each machine (tests/test_rowops_kernels.py).

``backend=None`` picks ``triton`` for CUDA tensors and ``torch`` otherwise.
Half inputs are computed in fp32 and cast back once, as torch does.
"""

from __future__ import annotations

import torch

from .device import resolve


def _backend(x: torch.Tensor, backend: str | None) -> str:
    return resolve(x, backend)


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def tree_sum(v: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim by pairwise halving of a zero-padded power-of-two row.

    The order depends on the row length only, and every step is elementwise,
    so each row's sum is independent of the other rows.
    """
    n = v.shape[-1]
    width = 1 << max(0, (n - 1).bit_length())
    if width != n:
        v = torch.nn.functional.pad(v, (0, width - n))
    while width > 1:
        width //= 2
        v = v[..., :width] + v[..., width:]
    return v[..., 0]


def _rows(x: torch.Tensor) -> torch.Tensor:
    """View ``x`` as 2-D rows over its last dim, contiguous."""
    return x.reshape(-1, x.shape[-1]).contiguous()


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float | None = None,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """``x * rsqrt(mean(x**2, -1) + eps) * weight`` with a batch-invariant reduction.

    ``eps=None`` means ``torch.finfo(x.dtype).eps``, as ``F.rms_norm``.
    """
    be = _backend(x, backend)
    n = x.shape[-1]
    eps = torch.finfo(x.dtype).eps if eps is None else float(eps)
    x2 = _rows(x)
    if be == "torch" or x.dtype == torch.float64:
        acc = _acc_dtype(x.dtype)
        xf = x2.to(acc)
        rstd = torch.rsqrt(tree_sum(xf * xf) / n + eps)
        y = xf * rstd[:, None]
        if weight is not None:
            y = y * weight.to(acc)
        return y.to(x.dtype).reshape(x.shape)
    from . import _rowops_triton as tk

    w = weight if weight is not None else torch.ones(n, dtype=x.dtype, device=x.device)
    out = torch.empty_like(x2)
    tk.rmsnorm(x2, w.contiguous(), eps, out)
    return out.reshape(x.shape)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """Registry signature of the ``rmsnorm`` family: ``fn(x[M, H], weight[H], eps)``."""
    return rms_norm(x, weight, eps)


def log_softmax(
    x: torch.Tensor, dim: int = -1, dtype: torch.dtype | None = None, *, backend: str | None = None
) -> torch.Tensor:
    """``log_softmax(x, dim)`` with one fixed reduction order per row."""
    if dtype is not None:
        x = x.to(dtype)
    dim = dim % x.dim() if x.dim() else 0
    if x.dim() and dim != x.dim() - 1:
        return log_softmax(x.movedim(dim, -1), -1, backend=backend).movedim(-1, dim)
    if x.dim() == 0:
        return log_softmax(x.reshape(1), backend=backend).reshape(())
    be = _backend(x, backend)
    x2 = _rows(x)
    if be == "torch" or x.dtype == torch.float64:
        xf = x2.to(_acc_dtype(x.dtype))
        m = xf.amax(dim=-1, keepdim=True)
        shifted = xf - m
        lse = torch.log(tree_sum(torch.exp(shifted)))
        return (shifted - lse[:, None]).to(x.dtype).reshape(x.shape)
    from . import _rowops_triton as tk

    out = torch.empty_like(x2)
    tk.log_softmax(x2, out)
    return out.reshape(x.shape)


def mean(
    x: torch.Tensor,
    dim: int | list[int] | tuple[int, ...] | None = -1,
    keepdim: bool = False,
    dtype: torch.dtype | None = None,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """``x.mean(dim, keepdim)``; reduced dims are moved last and each output reduced in one fixed order."""
    if dtype is not None:
        x = x.to(dtype)
    nd = x.dim()
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        dims = list(range(nd))
    elif isinstance(dim, int):
        dims = [dim % max(nd, 1)]
    else:
        dims = sorted({d % max(nd, 1) for d in dim})
    if nd == 0:
        return x.clone()
    keep = [d for d in range(nd) if d not in dims]
    moved = x.permute(*keep, *dims)
    out_shape = [x.shape[d] for d in keep]
    r = 1
    for d in dims:
        r *= x.shape[d]
    x2 = moved.reshape(-1, r).contiguous()
    be = _backend(x, backend)
    if be == "torch" or x.dtype == torch.float64 or r == 0:
        res = (tree_sum(x2.to(_acc_dtype(x.dtype))) / r).to(x.dtype) if r else x2.sum(-1) / 0
    else:
        from . import _rowops_triton as tk

        res = torch.empty(x2.shape[0], dtype=x.dtype, device=x.device)
        tk.mean(x2, res)
    res = res.reshape(out_shape)
    if keepdim:
        for d in dims:
            res = res.unsqueeze(d)
    return res


def mean_last(x: torch.Tensor) -> torch.Tensor:
    """Registry signature of the ``mean`` kernels: ``fn(x[M, V]) -> x.mean(-1)``."""
    return mean(x, -1)


def log_softmax_last(x: torch.Tensor) -> torch.Tensor:
    """Registry signature of the ``softmax`` family: ``fn(x[M, V]) -> log_softmax(x, -1)``."""
    return log_softmax(x, -1)


# --- stock row ops (what the suites measure against the reference) ----------------------------


def stock_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """``F.rms_norm`` over the last dimension."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)


def stock_log_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(x, dim=-1)


def stock_mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean(dim=-1)
