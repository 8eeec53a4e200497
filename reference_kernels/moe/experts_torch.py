"""Batch-invariant fused experts in plain torch (CPU path, and the oracle of the Triton kernels).

Each (token, slot) pair is computed on its own: the expert's weight rows are
gathered, multiplied element-wise with the token's activations in fp32 and
summed over the reduction axis with the fixed pairwise tree of ``tree_sum``.
No matmul library is involved, so no kernel heuristic can look at how many
tokens an expert received. The k slot outputs are combined in slot order in
fp32 and cast once.

Numerics (shared with the Triton kernels): gate_up = x @ W1[e].T in fp32;
act = silu(gate) * up (W1 rows [0, I) are the gate, [I, 2I) the up projection),
rounded to the activation dtype; y = act @ W2[e].T in fp32;
out = sum_j weights[:, j] * y[:, j] in slot order, cast to x.dtype.

FP8 experts quantize activations per token (per (token, slot) row for the
intermediate): scale = amax(|row|) / 448, values cast to float8_e4m3fn; weights
are float8_e4m3fn with one fp32 scale per output channel [E, N].
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .detmath import det_silu
from .tree import ordered_sum, tree_sum

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
# Elements of the gathered [chunk, N, K] product kept in memory at once.
_CHUNK_ELEMS = 1 << 22


def check_shapes(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, weights, ids) -> None:
    """Raise a clear error unless x[T, H], w_gate_up[E, 2I, H], w_down[E, H, I], weights/ids[T, k]."""
    if x.dim() != 2 or w_gate_up.dim() != 3 or w_down.dim() != 3:
        raise ValueError("expected x[T, H], w_gate_up[E, 2I, H], w_down[E, H, I]")
    t, h = x.shape
    e, two_i, h1 = w_gate_up.shape
    if h1 != h or two_i % 2 or tuple(w_down.shape) != (e, h, two_i // 2):
        raise ValueError(
            f"shape mismatch: x {tuple(x.shape)}, w_gate_up {tuple(w_gate_up.shape)}, w_down {tuple(w_down.shape)}"
        )
    if weights.shape != ids.shape or weights.dim() != 2 or weights.shape[0] != t:
        raise ValueError(f"weights {tuple(weights.shape)} and ids {tuple(ids.shape)} must both be [T, k]")


def rowwise_linear(a: torch.Tensor, w: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """fp32 ``a[r] @ w[idx[r]].T`` for every row r, by element-wise products and a tree sum over K."""
    rows, k = a.shape
    n = w.shape[1]
    chunk = max(1, _CHUNK_ELEMS // max(1, n * k))
    out = []
    for lo in range(0, rows, chunk):
        wa = w[idx[lo : lo + chunk]].float()  # [c, N, K]
        prod = wa * a[lo : lo + chunk, None, :].float()
        out.append(tree_sum(prod))
    return torch.cat(out) if out else a.new_zeros((0, n), dtype=torch.float32)


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up in fp32, gate = first half of the last dim."""
    i = gate_up.shape[-1] // 2
    return det_silu(gate_up[..., :i]) * gate_up[..., i:]


def combine(y: torch.Tensor, weights: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """sum_j weights[:, j] * y[:, j, :] in slot order, fp32, cast once to ``dtype``."""
    return ordered_sum((y * weights.float()[:, :, None]).transpose(1, 2)).to(dtype)


def slot_outputs_torch(
    x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, ids: torch.Tensor
) -> torch.Tensor:
    """fp32 expert outputs per (token, slot) [T, k, H], before the weighted combine."""
    t, k = ids.shape
    flat_ids = ids.reshape(-1)
    xa = x.repeat_interleave(k, dim=0)  # row r = token r // k, slot r % k
    act = swiglu(rowwise_linear(xa, w_gate_up, flat_ids)).to(x.dtype)
    return rowwise_linear(act, w_down, flat_ids).view(t, k, -1)


def fused_experts_torch(
    x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor
) -> torch.Tensor:
    """Reference fused experts (bf16/fp16/fp32) computed per (token, slot) in a fixed order."""
    check_shapes(x, w_gate_up, w_down, weights, ids)
    return combine(slot_outputs_torch(x, w_gate_up, w_down, ids), weights, x.dtype)


def quantize_rows(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row dynamic FP8: (a / s).to(e4m3) with s = amax(|row|) / 448 (fp32 [R, 1])."""
    af = a.float()
    s = (af.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp_min(1e-12)
    return (af / s).clamp(-FP8_MAX, FP8_MAX).to(FP8), s


def quantize_tensor(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor dynamic FP8 (one scale for the whole batch): the batch-variant choice."""
    af = a.float()
    s = (af.abs().amax() / FP8_MAX).clamp_min(1e-12).expand(af.shape[0], 1)
    return (af / s).clamp(-FP8_MAX, FP8_MAX).to(FP8), s


def quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel FP8 for expert weights [E, N, K]: (w_fp8, scale fp32 [E, N])."""
    # One expert at a time: an fp32 copy of all experts of a DeepSeek-sized layer is ~28 GiB.
    q = torch.empty(w.shape, dtype=FP8, device=w.device)
    s = torch.empty(w.shape[:-1], dtype=torch.float32, device=w.device)
    for e in range(w.shape[0]):
        wf = w[e].float()
        s[e] = (wf.abs().amax(dim=-1) / FP8_MAX).clamp_min(1e-12)
        q[e] = (wf / s[e][..., None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q, s


def fp8_experts_torch(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    w_gate_up_scale: torch.Tensor,
    w_down_scale: torch.Tensor,
    weights: torch.Tensor,
    ids: torch.Tensor,
    *,
    quantize: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] = quantize_rows,
) -> torch.Tensor:
    """FP8 fused experts; ``quantize`` chooses the activation scales (per token by default)."""
    check_shapes(x, w_gate_up, w_down, weights, ids)
    t, k = ids.shape
    flat_ids = ids.reshape(-1)
    xq, xs = quantize(x)
    xq = xq.repeat_interleave(k, dim=0)
    xs = xs.repeat_interleave(k, dim=0)
    gu = rowwise_linear(xq, w_gate_up, flat_ids) * xs * w_gate_up_scale[flat_ids]
    aq, as_ = quantize(swiglu(gu))
    y = rowwise_linear(aq, w_down, flat_ids) * as_ * w_down_scale[flat_ids]
    return combine(y.view(t, k, -1), weights, x.dtype)
