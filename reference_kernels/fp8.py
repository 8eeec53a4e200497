"""FP8 (e4m3) GEMM with bf16 output: quantizers, the reference kernel, the stock path.

The ``fp8-gemm`` family's call is ``fn(x[M, K], w_fp8[N, K], w_scale, x_scale=None)
-> bf16[M, N]``: the activation is quantized inside. ``x_scale=None`` means
per-token scales (each row's own amax: ``fp8-e4m3-token``); a given scalar
``x_scale`` is a per-tensor static scale calibrated offline
(``fp8-e4m3-tensor-static``). Both keep a row's quantization independent of
its neighbours. Weights are per-tensor static (``quantize_weight``).

Where batch invariance of FP8 usually breaks is not the GEMM but the scale: a
*dynamic per-tensor* activation scale is the amax of the whole batch, so a
row's quantization depends on the other rows; see
``mutants/fp8_dynamic_scale.py``.
"""

from __future__ import annotations

import torch

from . import matmul_cpu
from .device import resolve

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
MIN_SCALE = 1e-12
QUANT_TOKEN = "fp8-e4m3-token"
QUANT_STATIC = "fp8-e4m3-tensor-static"
QUANT_DYNAMIC = "fp8-e4m3-tensor-dynamic"


def quantize(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x / scale`` saturated to the e4m3 range and rounded to e4m3 (element-wise)."""
    return (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)


def per_token_scale(x: torch.Tensor) -> torch.Tensor:
    """``[M, 1]`` fp32 scales, each from its own row's amax (max is exact in any order)."""
    return (x.float().abs().amax(dim=-1, keepdim=True) / E4M3_MAX).clamp(min=MIN_SCALE)


def tensor_scale(x: torch.Tensor) -> torch.Tensor:
    """Scalar fp32 scale from the amax of the whole tensor (calibration, or a weight)."""
    return (x.float().abs().amax() / E4M3_MAX).clamp(min=MIN_SCALE)


def quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor static weight quantization: ``(w_fp8[N, K], w_scale scalar)``."""
    s = tensor_scale(w)
    return quantize(w, s), s


def quantize_activation(x: torch.Tensor, x_scale: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token (``x_scale=None``) or static per-tensor quantization of ``x[M, K]``."""
    s = per_token_scale(x) if x_scale is None else x_scale.to(torch.float32).reshape(())
    return quantize(x, s), s


def _use_triton(t: torch.Tensor, backend: str) -> bool:
    return resolve(t, backend, torch_on_cuda=False) != "torch"


def fp8_mm(
    xq: torch.Tensor,
    wq: torch.Tensor,
    x_scale: torch.Tensor,
    w_scale: torch.Tensor,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """``(xq @ wq.T) * x_scale * w_scale`` -> bf16, accumulated in fp32 in a fixed order.

    CPU path: e4m3 products are exact in fp32, so dequantizing to fp32 and
    running the 16-row-tiled BLAS product gives the fp32 sum of exact
    products in one fixed order per row; the scales follow in the same order
    as the Triton epilogue.
    """
    if _use_triton(xq, backend):
        from .fp8_triton import fp8_mm_triton

        return fp8_mm_triton(xq, wq, x_scale, w_scale)
    acc = matmul_cpu.mm_tiled(xq.float(), wq.float().t())
    xs = x_scale.to(torch.float32)
    xs = xs.reshape(-1, 1) if xs.numel() > 1 else xs.reshape(())
    return ((acc * xs) * w_scale.to(torch.float32).reshape(())).to(torch.bfloat16)


def fp8_linear(
    x: torch.Tensor,
    w_fp8: torch.Tensor,
    w_scale: torch.Tensor,
    x_scale: torch.Tensor | None = None,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """Reference FP8 linear: quantize ``x`` (per token, or with static ``x_scale``), then ``fp8_mm``."""
    xq, xs = quantize_activation(x, x_scale)
    return fp8_mm(xq, w_fp8, xs, w_scale, backend=backend)


def fp8_linear_interpret(
    x: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor, x_scale: torch.Tensor | None = None
) -> torch.Tensor:
    """The Triton FP8 kernel under the interpreter (CPU tests on tiny shapes)."""
    return fp8_linear(x, w_fp8, w_scale, x_scale, backend="interpret")


def scaled_mm_available(device: str | torch.device) -> bool:
    """Whether stock ``torch._scaled_mm`` exists and runs here (CUDA needs sm89+)."""
    if not hasattr(torch, "_scaled_mm"):
        return False
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.get_device_capability(dev) >= (8, 9)
    try:
        one = torch.ones((), dtype=torch.float32)
        a = torch.zeros((16, 16), dtype=E4M3)
        torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError):
        return False
    return True


def stock_fp8_linear(
    x: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor, x_scale: torch.Tensor | None = None
) -> torch.Tensor:
    """Stock path: the same quantization, then ``torch._scaled_mm`` (cuBLASLt on CUDA).

    Per-token scales use the row-wise form, which wants the weight scale as a
    ``[1, N]`` row too; so does a static scale on CPU (see below).
    """
    xq, xs = quantize_activation(x, x_scale)
    ws = w_scale.to(torch.float32)
    # torch's CPU per-tensor _scaled_mm is a slow reference loop (~10 s for 33x896x1152 on
    # 2 cores); there a static scale goes through the row-wise form with equal row scales.
    if x_scale is None or x.device.type == "cpu":
        scale_a = xs.reshape(-1, 1).expand(x.shape[0], 1).contiguous()
        scale_b = ws.reshape(1, 1).expand(1, w_fp8.shape[0]).contiguous()
    else:
        scale_a, scale_b = xs.reshape(()), ws.reshape(())
    return torch._scaled_mm(xq, w_fp8.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
