"""The bundled engine's model as an ``nn.Module`` that localization can trace.

The engine's ``Model`` is plain tensors driven through a ``Kernels`` object, so it has no module
paths of its own. :class:`BundledLM` runs one prefill step of B sequences of T tokens through
``Model.forward`` with a kernel proxy that calls each kernel through a named submodule
(``model.layers.0.self_attn.qkv_proj``...), named by the fixed order in which ``Model.forward``
calls its kernels. The KV cache is fresh per forward, and the probe's sequence always gets the
first blocks (``place_probe``, which ``localize(..., before_run=...)`` calls), so its cache slots,
slot mapping and block table are the same alone and in any batch position.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

# Per-layer kernel calls of Model.forward, in order (dense and MoE layers).
DENSE = ("input_layernorm", "self_attn.qkv_proj", "self_attn.kv_write", "self_attn.attn", "self_attn.o_proj",
         "post_attention_layernorm", "mlp.gate_up_proj", "mlp.down_proj")  # fmt: skip
MOE = ("input_layernorm", "self_attn.qkv_proj", "self_attn.kv_write", "self_attn.attn", "self_attn.o_proj",
       "post_attention_layernorm", "mlp.gate", "mlp.router", "mlp.experts")  # fmt: skip


class KernelCall(nn.Module):
    """A module whose forward is one kernel call, so hooks see it under its path."""

    def forward(self, fn: Any, *args: Any) -> Any:
        return fn(*args)


def _child(root: nn.Module, path: str) -> KernelCall:
    mod = root
    parts = path.split(".")
    for p in parts[:-1]:
        if not hasattr(mod, p):
            mod.add_module(p, nn.Module())
        mod = getattr(mod, p)
    if not hasattr(mod, parts[-1]):
        mod.add_module(parts[-1], KernelCall())
    return getattr(mod, parts[-1])


class _Proxy:
    """Kernels with every call routed through the submodule its order in Model.forward names."""

    def __init__(self, lm: BundledLM) -> None:
        self.lm, self.k, self.calls = lm, lm.kernels, 0

    def _call(self, attr: str, *args: Any) -> Any:
        path = self.lm.order[self.calls] if self.calls < len(self.lm.order) else f"extra.{attr}{self.calls}"
        self.calls += 1
        return _child(self.lm, path)(getattr(self.k, attr), *args)

    def __getattr__(self, attr: str) -> Any:
        if attr in ("rms_norm", "linear", "write_kv", "attention", "route", "experts"):
            return lambda *a: self._call(attr, *a)
        return getattr(self.k, attr)


class BundledLM(nn.Module):
    """``forward(ids[B, T]) -> logits[B, T, V]`` (fp32): one prefill step of the bundled engine."""

    def __init__(self, model_cfg: Any = None, *, invariant: bool = False, device: str = "cpu",
                 units: int | None = None, **engine: Any) -> None:  # fmt: skip
        super().__init__()
        from pytest_invariance.engine.config import EngineConfig, demo_model
        from pytest_invariance.engine.kernels import Kernels
        from pytest_invariance.engine.model import Model
        from pytest_invariance.engine.weights import synthetic_weights

        mcfg = model_cfg or demo_model()
        self.cfg = EngineConfig(model=mcfg, batch_invariant=invariant, device=device, **engine)
        self._args = (mcfg, device, units, engine)
        dev = torch.device(device)
        self.model = _Weights(Model(mcfg, synthetic_weights(mcfg, dev), dev))
        self.kernels = Kernels(self.cfg, dev, mcfg.kv_heads, units)
        self.order = [f"model.layers.{i}.{n}" for i in range(mcfg.layers) for n in (MOE if mcfg.is_moe_layer(i) else DENSE)]
        self.order += ["model.norm", "lm_head"]
        self.probe_position = 0
        for path in self.order:
            _child(self, path)

    def default_twin(self) -> BundledLM:
        """The same model (same synthetic weights) with the engine's default-mode kernels."""
        mcfg, device, units, engine = self._args
        return BundledLM(mcfg, invariant=False, device=device, units=units, **engine)

    def place_probe(self, n: int, position: int) -> None:
        """The row at ``position`` of the next batch is the probe: it takes the first cache blocks."""
        self.probe_position = position

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        from pytest_invariance.engine.kernels import AttnBatch

        m, bs = self.model.m, self.cfg.block_size
        b, t = ids.shape
        dev = ids.device
        nb = -(-t // bs)
        # Cache groups: the probe's sequence gets group 0, the others 1.. in batch order.
        group = [0 if i == self.probe_position else 1 + i - (i > self.probe_position) for i in range(b)]
        tables = [[g * nb + j for j in range(nb)] for g in group]
        slots = [tables[i][p // bs] * bs + p % bs for i in range(b) for p in range(t)]
        meta = AttnBatch([i * t for i in range(b)], [t] * b, [t] * b, tables,
                         torch.tensor(slots, dtype=torch.long, device=dev))  # fmt: skip
        # Sized by the batch (b * nb blocks + a spare), so its layout reads as unknown: ops that read
        # it are compared at their outputs (a fixed-size cache cost 2.5x the time in digests).
        shape = (b * nb + 1, bs, m.cfg.kv_heads, m.cfg.head_dim)
        kv = [(torch.zeros(shape, dtype=m.embed.dtype, device=dev), torch.zeros(shape, dtype=m.embed.dtype, device=dev))
              for _ in range(m.cfg.layers)]  # fmt: skip
        positions = torch.arange(t, device=dev).repeat(b)
        proxy = _Proxy(self)
        hidden = m.forward(proxy, ids.reshape(-1), positions, meta, kv)
        return m.logits(proxy, hidden).reshape(b, t, -1)


class _Weights(nn.Module):
    """Holds the engine model and registers its tensors as buffers (read-only during a forward)."""

    def __init__(self, m: Any) -> None:
        super().__init__()
        self.m = m
        named = {"embed": m.embed, "norm": m.norm, "lm_head": m.lm_head, "rope_cos": m.rope.cos, "rope_sin": m.rope.sin}
        for i, lay in enumerate(m.layers):
            named.update({f"l{i}_{k}": v for k, v in lay.items() if isinstance(v, torch.Tensor)})
        for k, v in named.items():
            self.register_buffer(f"w_{k}", v, persistent=False)  # w_: no clash with module paths


def before_run(model: Any, n: int, position: int) -> None:
    """``localize``'s hook: tell a :class:`BundledLM` where the probe sits (others: nothing)."""
    if isinstance(model, BundledLM):
        model.place_probe(n, position)
