"""Fused norms of a decoder layer: residual-add + RMSNorm, and RMSNorm -> FP8 quantization.

Families and their calls (rows on dim 0 are tokens):

- ``add-rmsnorm``: ``fn(x[M, H], residual[M, H], weight[H], eps) -> (x, residual)``, in place as
  vLLM's ``fused_add_rms_norm``: ``residual <- x + residual`` (rounded to the activation dtype),
  then ``x <- rms_norm(residual) * weight``; both tensors are returned.
- ``rmsnorm-fp8-quant``: ``fn(x[M, H], weight[H], eps, scale=None) -> (q e4m3 [M, H], scale)``:
  the normalised row (rounded to x's dtype) divided by the scale and cast to e4m3. ``scale``
  given: per-tensor static (``fp8-e4m3-tensor-static``); None: a scale per token from its own
  amax (``fp8-e4m3-token``). The per-tensor *dynamic* scale (amax over the whole batch) is the
  batch-variant choice, shipped as stock ``torch-tensor-dynamic`` and as the family's mutant.

Reference: the sum of squares of one row in one fixed order (``rowops.tree_sum`` on CPU, one
Triton program per row on CUDA, ``_fused_norm_triton``); nothing a row computes reads another row.
"""

from __future__ import annotations

import torch

from .device import resolve
from .fp8 import E4M3, E4M3_MAX, MIN_SCALE, QUANT_DYNAMIC, QUANT_STATIC, QUANT_TOKEN
from .rowops import rms_norm

__all__ = ["QUANT_DYNAMIC", "QUANT_STATIC", "QUANT_TOKEN"]


def _eps(x: torch.Tensor, eps: float | None) -> float:
    return torch.finfo(x.dtype).eps if eps is None else float(eps)


def _check_rows(x: torch.Tensor, *others: torch.Tensor) -> None:
    if x.dim() != 2 or not x.is_contiguous():
        raise ValueError(f"expected a contiguous x[M, H], got shape {tuple(x.shape)}")
    for o in others:
        if o.shape != x.shape or o.dtype != x.dtype or not o.is_contiguous():
            raise ValueError(f"residual must match x {tuple(x.shape)} {x.dtype}, got {tuple(o.shape)} {o.dtype}")


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float | None = None, *,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Reference fused residual-add + RMSNorm, in place on ``x`` and ``residual``."""
    _check_rows(x, residual)
    be = resolve(x, backend)
    if be == "torch":
        residual.add_(x)  # an IEEE add per element, rounded once to the dtype
        x.copy_(rms_norm(residual, weight, eps, backend="torch"))
        return x, residual
    from . import _fused_norm_triton as tk

    tk.add_rmsnorm(x, residual, weight.contiguous(), _eps(x, eps))
    return x, residual


def stock_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stock: ``residual += x`` then ``F.rms_norm`` into ``x`` (what an unfused model runs)."""
    residual.add_(x)
    x.copy_(torch.nn.functional.rms_norm(residual, (x.shape[-1],), weight, eps))
    return x, residual


def quantize_e4m3(y: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``y / scale`` in fp32, saturated to +-448 and cast to e4m3 (element-wise)."""
    return (y.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)


def token_scales(y: torch.Tensor) -> torch.Tensor:
    """fp32 ``[M, 1]``: each row's own amax / 448 (a max is exact in any order)."""
    return (y.float().abs().amax(dim=-1, keepdim=True) / E4M3_MAX).clamp(min=MIN_SCALE)


def batch_scale(y: torch.Tensor) -> torch.Tensor:
    """fp32 ``[1, 1]``: amax of the whole batch / 448: every row's quantization sees every other row."""
    return (y.float().abs().amax() / E4M3_MAX).clamp(min=MIN_SCALE).reshape(1, 1)


def _quantize(y: torch.Tensor, scale: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    s = token_scales(y) if scale is None else scale.to(torch.float32).reshape(1, 1)
    return quantize_e4m3(y, s), s


def rms_norm_fp8_quant(
    x: torch.Tensor, weight: torch.Tensor, eps: float | None = None, scale: torch.Tensor | None = None, *,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Reference RMSNorm -> e4m3: static per-tensor ``scale``, or per-token scales when None."""
    _check_rows(x)
    be = resolve(x, backend)
    if be == "torch":
        return _quantize(rms_norm(x, weight, eps, backend="torch"), scale)
    from . import _fused_norm_triton as tk

    return tk.rmsnorm_fp8(x, weight.contiguous(), _eps(x, eps), scale)


def stock_rms_norm_fp8_quant(
    x: torch.Tensor, weight: torch.Tensor, eps: float | None = None, scale: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stock: ``F.rms_norm`` then the same quantization (static or per token)."""
    return _quantize(torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps), scale)


def stock_rms_norm_fp8_tensor_dynamic(
    x: torch.Tensor, weight: torch.Tensor, eps: float | None = None, scale: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stock with a dynamic per-tensor scale (``scaled_fp8_quant(x)`` without a scale): ``scale`` ignored."""
    del scale  # dynamic by construction
    y = torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)
    s = batch_scale(y)
    return quantize_e4m3(y, s), s


stock_rms_norm_fp8_tensor_dynamic.quantization = QUANT_DYNAMIC  # type: ignore[attr-defined]


def rms_norm_fp8_interpret(x, weight, eps=None, scale=None):
    return rms_norm_fp8_quant(x, weight, eps, scale, backend="interpret")


def add_rms_norm_interpret(x, residual, weight, eps=None):
    return add_rms_norm(x, residual, weight, eps, backend="interpret")
