"""Rotary position embedding for the query and key heads of one step.

Why a kernel: the torch form (two table gathers, a cast, six element-wise ops, a concatenation
and a cast back, for q and again for k) is 22 launches a layer; in a CUDA-graph decode step each
costs a few microseconds whatever the batch, about a millisecond a step for a 32-layer model. On
CUDA one Triton launch rotates every q and k head of the step and gives the same bits as the torch
form: fp32 tables, ``x1 * cos - x2 * sin`` with each product rounded (no FMA contraction), one
rounding to the activations' dtype. Element-wise per token, so it cannot depend on the batch.
Elsewhere (CPU) the torch form runs.
"""

from __future__ import annotations

import torch

from .config import ModelConfig


class RoPE:
    """Rotary tables in fp32 (half-split layout, as Llama / Qwen2 in Hugging Face)."""

    def __init__(self, cfg: ModelConfig, device: torch.device):
        half = cfg.head_dim // 2
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, half, dtype=torch.float64) / half))
        ang = torch.arange(cfg.max_position, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos = ang.cos().float().to(device).contiguous()
        self.sin = ang.sin().float().to(device).contiguous()

    def __call__(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``x`` [T, H, D] rotated at ``positions`` [T] (the torch form)."""
        cos = self.cos[positions][:, None, :]
        sin = self.sin[positions][:, None, :]
        xf = x.float()
        x1, x2 = xf.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)

    def query_key(self, qkv: torch.Tensor, positions: torch.Tensor, heads: int, kv_heads: int,
                  head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """q [T, heads, D] and k [T, kv_heads, D] of the fused projection ``qkv``, rotated."""
        if qkv.is_cuda:
            from ._rope_triton import rotate_query_key

            return rotate_query_key(qkv, positions, self.cos, self.sin, heads, kv_heads, head_dim)
        q_dim, kv_dim = heads * head_dim, kv_heads * head_dim
        q = qkv[:, :q_dim].reshape(-1, heads, head_dim)
        k = qkv[:, q_dim : q_dim + kv_dim].reshape(-1, kv_heads, head_dim)
        return self(q, positions), self(k, positions)
