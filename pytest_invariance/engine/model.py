"""Llama-style decoder over a flat token batch (RMSNorm, RoPE, GQA, SwiGLU, optional MoE).

Every reduction goes through the `Kernels` object, so the model code is the same in both modes;
elementwise work (RoPE, SiLU, residual adds) is computed per element and cannot depend on the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F

from .config import ModelConfig
from .kernels import AttnBatch, Kernels
from .rope import RoPE
from .weights import synthetic_rows


def _same(x: torch.Tensor) -> torch.Tensor:
    return x


class Model:
    """Weights packed for the forward pass (fused QKV and gate/up; stacked experts)."""

    def __init__(self, cfg: ModelConfig, weights: Iterable[tuple[str, torch.Tensor]], device: torch.device):
        self.cfg = cfg
        self.device = device
        w = {name: t.to(device) for name, t in weights}
        self.embed = w.pop("model.embed_tokens.weight")
        self.norm = w.pop("model.norm.weight")
        self.lm_head = self.embed if cfg.tie_embeddings else w.pop("lm_head.weight")
        self.layers: list[dict[str, torch.Tensor | None]] = []
        for i in range(cfg.layers):
            p = f"model.layers.{i}."
            lay: dict[str, torch.Tensor | None] = {
                "in_norm": w.pop(p + "input_layernorm.weight"),
                "post_norm": w.pop(p + "post_attention_layernorm.weight"),
                "qkv": torch.cat([w.pop(p + f"self_attn.{n}_proj.weight") for n in "qkv"]),
                "qkv_bias": torch.cat([w.pop(p + f"self_attn.{n}_proj.bias") for n in "qkv"])
                if cfg.attention_bias
                else None,
                "o": w.pop(p + "self_attn.o_proj.weight"),
            }
            if cfg.is_moe_layer(i):
                e = cfg.n_experts
                lay["router"] = w.pop(p + "mlp.gate.weight")
                lay["w_gate_up"] = torch.stack(
                    [
                        torch.cat(
                            [
                                w.pop(p + f"mlp.experts.{j}.gate_proj.weight"),
                                w.pop(p + f"mlp.experts.{j}.up_proj.weight"),
                            ]
                        )
                        for j in range(e)
                    ]
                )
                lay["w_down"] = torch.stack(
                    [w.pop(p + f"mlp.experts.{j}.down_proj.weight") for j in range(e)]
                )
            else:
                lay["gate_up"] = torch.cat(
                    [w.pop(p + "mlp.gate_proj.weight"), w.pop(p + "mlp.up_proj.weight")]
                )
                lay["down"] = w.pop(p + "mlp.down_proj.weight")
            self.layers.append(lay)
        if w:
            raise ValueError(f"unused weights: {sorted(w)[:5]}")
        self.rope = RoPE(cfg, device)
        self.scale = cfg.head_dim**-0.5
        # Tensor-parallel hooks (engine.tensor_parallel shards the weights and sets them): this
        # rank's head counts, the all-reduce after a row-parallel GEMM, the vocabulary gather.
        self.heads, self.kv_heads = cfg.heads, cfg.kv_heads
        self.reduce: Callable[[torch.Tensor], torch.Tensor] = _same
        self.gather_vocab: Callable[[torch.Tensor], torch.Tensor] = _same

    def forward(
        self,
        kern: Kernels,
        ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttnBatch,
        kv: list[tuple[torch.Tensor, torch.Tensor]],
        max_id: int | None = None,
    ) -> torch.Tensor:
        """Hidden states after the final norm for every token of the step: [T, hidden].

        ``max_id``: the largest id in ``ids`` when the caller knows it (it spares a device sync)."""
        cfg = self.cfg
        q_dim, kv_dim = self.heads * cfg.head_dim, self.kv_heads * cfg.head_dim
        x = self._embed(ids, max_id)
        for lay, (k_cache, v_cache) in zip(self.layers, kv, strict=True):
            h = kern.rms_norm(x, lay["in_norm"], cfg.rms_eps)
            qkv = kern.linear(h, lay["qkv"], lay["qkv_bias"])
            q, k = self.rope.query_key(qkv, positions, self.heads, self.kv_heads, cfg.head_dim)
            v = qkv[:, q_dim + kv_dim :].reshape(-1, self.kv_heads, cfg.head_dim)
            kern.write_kv(k_cache, v_cache, k, v, meta.slot_mapping)
            a = kern.attention(q, k_cache, v_cache, meta, self.scale)
            x = x + self.reduce(kern.linear(a.reshape(-1, q_dim), lay["o"]))
            h = kern.rms_norm(x, lay["post_norm"], cfg.rms_eps)
            if "router" in lay:
                weights, experts = kern.route(kern.linear(h, lay["router"]), cfg.top_k)
                x = x + kern.experts(h, lay["w_gate_up"], lay["w_down"], weights, experts)
            else:
                gu = kern.linear(h, lay["gate_up"])
                inter = gu.shape[-1] // 2
                x = x + self.reduce(kern.linear(F.silu(gu[:, :inter]) * gu[:, inter:], lay["down"]))
        return kern.rms_norm(x, self.norm, cfg.rms_eps)

    @property
    def embed_rows(self) -> int:
        """Ids below this have a materialized embedding row (the rest are reserved, generated on lookup)."""
        return self.embed.shape[0]

    def _embed(self, ids: torch.Tensor, max_id: int | None = None) -> torch.Tensor:
        """Embedding rows; a reserved id (past the materialized rows) gets its synthetic row."""
        n = self.embed.shape[0]
        if n >= self.cfg.vocab_size or ids.numel() == 0:
            return self.embed[ids]
        if (max_id if max_id is not None else int(ids.max())) < n:
            return self.embed[ids]
        x = self.embed[ids.clamp(max=n - 1)]
        reserved = ids >= n
        rows = synthetic_rows(self.cfg, "model.embed_tokens.weight", ids[reserved].tolist())
        x[reserved] = rows.to(x.device)
        return x

    def logits(self, kern: Kernels, hidden: torch.Tensor) -> torch.Tensor:
        """fp32 logits of the selected rows (the LM head GEMM in the model dtype, as engines do)."""
        return self.gather_vocab(kern.linear(hidden, self.lm_head)).float()
