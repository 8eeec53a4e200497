"""Block-wise FP8 GEMM, DeepSeek-V3 style: e4m3 weights with one scale per 128x128 block, e4m3
activations with one scale per token and 128 input channels (1x128 groups), bf16 out.

Family ``fp8-block-gemm``: ``fn(x[M, K] float, w_fp8[N, K], w_scale[ceil(N/128), ceil(K/128)])
-> bf16[M, N]``; the kernel quantizes the activation itself (``quantize_groups``: each token's
group amax / 448, so a token's quantization never reads another token).

Reference numerics: for each 128-wide K block in increasing order, the fp32 dot product of the
block, times the token's group scale, times the weight block's scale, added to one fp32
accumulator; cast to bf16 once. On CPU each block's product is the 16-row-tiled BLAS call of
``matmul_cpu`` (one shape whatever the batch); on CUDA the Triton kernel of ``fp8_block_triton``
(one tile configuration for every M, no split-K). Stock: dequantize both sides to bf16 and
``F.linear`` (the fallback a user meets without a block-FP8 kernel), and on CUDA torch's
block-scaled ``F.scaled_mm`` where this torch and GPU have it.
"""

from __future__ import annotations

import torch

from . import matmul_cpu
from .device import resolve
from .fp8 import E4M3, E4M3_MAX, MIN_SCALE

BLOCK = 128


def _blocks(n: int) -> int:
    return -(-n // BLOCK)


def _pad_to_block(t: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    pad = []
    for d in reversed(range(t.dim())):
        pad += [0, (-t.shape[d]) % BLOCK if d in dims else 0]
    return torch.nn.functional.pad(t, pad) if any(pad) else t


def quantize_weight_blocks(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w_fp8[N, K], scale fp32 [N/128, K/128])``: each 128x128 block by its own amax."""
    n, k = w.shape
    wp = _pad_to_block(w.float(), (0, 1))
    blocks = wp.reshape(_blocks(n), BLOCK, _blocks(k), BLOCK)
    s = (blocks.abs().amax(dim=(1, 3)) / E4M3_MAX).clamp(min=MIN_SCALE)
    q = (blocks / s[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return q.reshape(wp.shape)[:n, :k].contiguous(), s


def quantize_groups(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x_fp8[M, K], scale fp32 [M, K/128])``: each token's 128-channel group by its own amax."""
    m, k = x.shape
    xp = _pad_to_block(x.float(), (1,)).reshape(m, _blocks(k), BLOCK)
    s = (xp.abs().amax(dim=-1) / E4M3_MAX).clamp(min=MIN_SCALE)
    q = (xp / s[:, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return q.reshape(m, -1)[:, :k].contiguous(), s


def weight_scale_columns(w_scale: torch.Tensor, n: int) -> torch.Tensor:
    """``[K/128, N]``: each output channel's scale per K block (the 128x128 block scales spread over N)."""
    return w_scale.t().repeat_interleave(BLOCK, dim=1)[:, :n].contiguous()


def block_mm_torch(xq: torch.Tensor, xs: torch.Tensor, wq: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """fp32 ``sum_kb (xq[:, kb] @ wq[:, kb].T) * xs[:, kb] * ws[kb]`` in K-block order (tiled BLAS per block)."""
    m, k = xq.shape
    n = wq.shape[0]
    wsn = weight_scale_columns(w_scale, n)
    acc = torch.zeros((m, n), dtype=torch.float32, device=xq.device)
    for kb in range(_blocks(k)):
        lo, hi = kb * BLOCK, min(k, (kb + 1) * BLOCK)
        part = matmul_cpu.mm_tiled(xq[:, lo:hi].float(), wq[:, lo:hi].float().t())
        acc = acc + (part * xs[:, kb : kb + 1]) * wsn[kb]
    return acc


def fp8_block_linear(
    x: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor, *, backend: str | None = None
) -> torch.Tensor:
    """Reference block-FP8 linear: 1x128 activation groups, 128x128 weight blocks, fixed K order."""
    if x.dim() != 2 or w_fp8.dim() != 2 or x.shape[1] != w_fp8.shape[1]:
        raise ValueError(f"expected x[M, K] and w_fp8[N, K], got {tuple(x.shape)} and {tuple(w_fp8.shape)}")
    xq, xs = quantize_groups(x)
    if resolve(x, backend, torch_on_cuda=False) != "torch":
        from .fp8_block_triton import fp8_block_mm_triton

        return fp8_block_mm_triton(xq, xs, w_fp8, w_scale)
    return block_mm_torch(xq, xs, w_fp8, w_scale).to(torch.bfloat16)


def fp8_block_linear_interpret(x: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    return fp8_block_linear(x, w_fp8, w_scale, backend="interpret")


def dequantize_weight(w_fp8: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    n, k = w_fp8.shape
    s = w_scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:n, :k]
    return w_fp8.float() * s


def stock_dequant_linear(x: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """Stock fallback: both sides dequantized to bf16 (the same group quantization), then ``F.linear``."""
    xq, xs = quantize_groups(x)
    xd = (xq.float() * xs.repeat_interleave(BLOCK, 1)[:, : x.shape[1]]).to(torch.bfloat16)
    return torch.nn.functional.linear(xd, dequantize_weight(w_fp8, w_scale).to(torch.bfloat16))


def scaled_mm_blockwise_unavailable(device: str | torch.device) -> str | None:
    """Why torch's block-scaled ``F.scaled_mm`` cannot run here, or None where it does."""
    f = getattr(torch.nn.functional, "scaled_mm", None)
    if f is None or not hasattr(torch.nn.functional, "ScalingType"):
        return f"torch {torch.__version__} has no torch.nn.functional.scaled_mm with block recipes"
    dev = torch.device(device)
    if dev.type != "cuda":
        return "block-scaled F.scaled_mm is CUDA-only"
    if torch.cuda.get_device_capability(dev) < (9, 0):
        return "block-scaled F.scaled_mm needs sm90+"
    return None


def blockwise_scale_operands(xs: torch.Tensor, w_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The scale layouts torch's block-scaled ``scaled_mm`` checks (2.11 CUDA and 2.13 meta alike).

    Activation ``[M, K/128]`` with strides ``(1, M)`` (outer-dim-major, built explicitly: ``t().contiguous().t()``
    keeps stride ``(K/128, 1)`` when M == 1); weight ``[K/128, ceil(N/128)]`` for ``mat_b = w.t()`` with strides
    ``(1, K/128)``, i.e. the transpose of our contiguous ``[ceil(N/128), K/128]``.
    """
    m, kb = xs.shape
    xs_cm = torch.empty_strided((m, kb), (1, m), dtype=torch.float32, device=xs.device)
    xs_cm.copy_(xs)
    return xs_cm, w_scale.float().contiguous().t()


def stock_scaled_mm_blockwise(x: torch.Tensor, w_fp8: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """Stock on CUDA: ``F.scaled_mm`` with BlockWise1x128 activation and BlockWise128x128 weight scales."""
    F = torch.nn.functional
    xq, xs = quantize_groups(x)
    sa, sb = blockwise_scale_operands(xs, w_scale)
    return F.scaled_mm(xq, w_fp8.t(), sa, F.ScalingType.BlockWise1x128, sb,
                       F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)  # fmt: skip
